//! HTTP boot files, scripts and the booted callback, driven by curl; a script fetched by
//! someone other than its client (curl on the server) records no boot (network namespaces,
//! busybox udhcpc for the client's lease).

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, pattern, run, run_async};
use std::process::Command;
use std::time::Duration;

fn curl(args: &[&str]) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20"]).args(args);
    c
}

#[tokio::test]
async fn kernel_script_and_booted_are_served_and_recorded() {
    let fx = Fixture::new();
    // A link out of the loaders folder is refused here as TFTP refuses it.
    std::os::unix::fs::symlink("../pools.yaml", fx.path().join("loaders/escape.efi")).unwrap();
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);

    let (ok, script, err) = run_async(
        curl(&[&format!("{base}/boot/script/52:54:00:77:00:11.ipxe")]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert!(script.starts_with("#!ipxe"), "{script}");
    assert!(script.contains("root=nbd:127.0.0.1:"), "{script}");

    let out = fx.path().join("kernel.out");
    let (ok, _, err) = run_async(
        curl(&[
            "-o",
            out.to_str().unwrap(),
            &format!("{base}/boot/demo/vmlinuz"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), pattern(1, 3 << 20));

    // Paths outside what an image serves are refused.
    for bad in [
        "/boot/demo/rootfs.img",
        "/boot/demo/..%2F..%2Fpools.yaml",
        "/boot/nope/vmlinuz",
        "/boot/loaders/..%2Fpools.yaml",
        "/boot/loaders/escape.efi",
        "/boot/loaders/.hidden",
    ] {
        let (ok, code, _) = run_async(
            curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}{bad}"),
            ]),
            30,
        )
        .await;
        assert!(ok);
        assert_eq!(code, "404", "{bad}");
    }

    let (ok, _, err) = run_async(
        curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data",
            "{\"uptime_s\": 12.5}",
            &format!("{base}/api/v1/booted"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    daemon.stop().await;
}

/// With `server.read_token`, curl without it gets 401 from the API, /metrics and the
/// dashboard; with it as a bearer token, or as `?token=` (which sets a cookie the dashboard's
/// own requests then carry), it gets through. Boot files and a client's report never need it.
#[tokio::test]
async fn a_read_token_guards_the_dashboard_api_and_metrics_but_not_boot_files() {
    const TOKEN: &str = "0123456789abcdef-read";
    let fx = Fixture::new();
    fx.write_config(&fx.loopback().server(&format!("read_token: {TOKEN}")));
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let status = |args: Vec<String>| async move {
        let mut all = vec![
            "-o".to_string(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
        ];
        all.extend(args);
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        let (_, out, _) = run_async(curl(&args), 30).await;
        out
    };
    let bearer = format!("Authorization: Bearer {TOKEN}");
    for path in ["/api/v1/boots", "/metrics", "/", "/api/v1/pools"] {
        assert_eq!(status(vec![format!("{base}{path}")]).await, "401", "{path}");
        assert_eq!(
            status(vec![
                "-H".into(),
                "Authorization: Bearer wrong-token-wrong".into(),
                format!("{base}{path}")
            ])
            .await,
            "401",
            "{path}"
        );
        assert_eq!(
            status(vec!["-H".into(), bearer.clone(), format!("{base}{path}")]).await,
            "200",
            "{path}"
        );
    }
    // A browser opens the link with the token once; the cookie does the rest.
    let jar = fx.path().join("cookies");
    let jar = jar.to_str().unwrap().to_string();
    assert_eq!(
        status(vec![
            "-c".into(),
            jar.clone(),
            format!("{base}/?token={TOKEN}")
        ])
        .await,
        "200"
    );
    assert_eq!(
        status(vec![
            "-b".into(),
            jar.clone(),
            format!("{base}/api/v1/waves")
        ])
        .await,
        "200"
    );
    // Actions are off without `server.admin_token`, whatever token is sent.
    assert_eq!(
        status(vec![
            "-X".into(),
            "POST".into(),
            "-H".into(),
            bearer.clone(),
            format!("{base}/api/v1/leases/52:54:00:77:00:01/release")
        ])
        .await,
        "403"
    );
    // The clients' side needs no token.
    assert_eq!(
        status(vec![format!("{base}/boot/demo/vmlinuz")]).await,
        "200"
    );
    assert_eq!(
        status(vec![
            "-X".into(),
            "POST".into(),
            format!("{base}/api/v1/booted")
        ])
        .await,
        "204"
    );
    daemon.stop().await;
}

/// A client's boot script names its address and kernel command line: with
/// `server.read_token`, another address gets 401 without the token and the script with it;
/// the client the script is for (here 127.0.0.1, reserved for :20) needs none.
#[tokio::test]
async fn a_boot_script_needs_the_read_token_from_anyone_but_its_client() {
    const TOKEN: &str = "0123456789abcdef-script";
    let fx = Fixture::new();
    fx.write_config(
        &fx.loopback()
            .reserving_127_0_0_1("52:54:00:77:00:20")
            .server(&format!("read_token: {TOKEN}")),
    );
    let daemon = fx.start().await;
    let base = format!("http://{}", daemon.bound.http);
    let get = |url: String, header: Option<String>| async move {
        let mut args = vec!["-s".to_string(), "-w".into(), "\n%{http_code}".into()];
        if let Some(h) = header {
            args.extend(["-H".to_string(), h]);
        }
        args.push(url);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, out, _) = run_async(curl(&args), 30).await;
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", ""));
        (code.to_string(), body.to_string())
    };
    let other = format!("{base}/boot/script/52:54:00:77:00:01.ipxe");
    let (code, body) = get(other.clone(), None).await;
    assert_eq!(code, "401", "{body}");
    assert!(!body.contains("#!ipxe"), "{body}");
    let (code, body) = get(
        other.clone(),
        Some("Authorization: Bearer wrong-token-here".into()),
    )
    .await;
    assert_eq!(code, "401", "{body}");
    let (code, body) = get(other, Some(format!("Authorization: Bearer {TOKEN}"))).await;
    assert_eq!(code, "200");
    assert!(body.starts_with("#!ipxe"), "{body}");
    let (code, body) = get(
        format!("{base}/boot/script/52:54:00:77:00:01.ipxe?token={TOKEN}"),
        None,
    )
    .await;
    assert_eq!(code, "200", "{body}");
    // Its own client asks from the address its lease holds: no token.
    let (code, body) = get(format!("{base}/boot/script/52:54:00:77:00:20.ipxe"), None).await;
    assert_eq!(code, "200", "{body}");
    assert!(body.starts_with("#!ipxe"), "{body}");
    daemon.stop().await;
}

/// `server.tls`: the same routes over HTTPS on a port of their own, with the certificate
/// pools.yaml names (curl checks it against that certificate as its CA); the read token is
/// asked there as on plain HTTP, and the plain port serves on. A client that does not trust
/// the certificate, or speaks plain HTTP to the HTTPS port, gets nothing.
#[tokio::test]
async fn tls_serves_the_api_with_the_configured_certificate() {
    const TOKEN: &str = "0123456789abcdef-tls";
    let fx = Fixture::new();
    let (cert, key) = (fx.path().join("cert.pem"), fx.path().join("key.pem"));
    let (ok, _, err) = crate::common::run(
        Command::new("openssl").args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=bootpool test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ]),
        60,
    );
    assert!(ok, "openssl: {err}");
    fx.write_config(&fx.loopback().server(&format!(
        "read_token: {TOKEN}\ntls: {{ listen: 127.0.0.1:0, cert: cert.pem, key: key.pem }}"
    )));
    let daemon = fx.start().await;
    let https = daemon.bound.https.expect("an HTTPS listener");
    assert_eq!(
        daemon
            .config
            .load()
            .server
            .tls
            .as_ref()
            .unwrap()
            .listen
            .port(),
        https.port(),
        "the served config names the bound port"
    );
    let base = format!("https://{https}");
    let cacert = cert.to_str().unwrap();
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let (ok, body, err) = run_async(
        curl(&[
            "--cacert",
            cacert,
            "-H",
            &bearer,
            &format!("{base}/api/v1/pools"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert!(body.contains("nfs-room"), "{body}");
    let (ok, code, err) = run_async(
        curl(&[
            "--cacert",
            cacert,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{base}/api/v1/boots"),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(code, "401", "the token is asked over TLS too");
    // Not trusted: curl refuses the self-signed certificate (exit 60), so no data.
    let (ok, body, err) = run_async(curl(&[&format!("{base}/api/v1/pools")]), 30).await;
    assert!(!ok && body.is_empty(), "{body} {err}");
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let (ok, _, _) = run_async(curl(&[&format!("http://{https}/api/v1/pools")]), 30).await;
    assert!(!ok);
    // The plain port is unchanged (boot files need no token).
    let (ok, code, err) = run_async(
        curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://{}/boot/demo/vmlinuz", daemon.bound.http),
        ]),
        30,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(code, "200");
    daemon.stop().await;
}

/// A certificate file that holds no certificate stops the start with an error naming the key
/// and the file.
#[tokio::test]
async fn a_bad_tls_certificate_is_named_at_start() {
    let fx = Fixture::new();
    std::fs::write(fx.path().join("cert.pem"), "not a certificate\n").unwrap();
    std::fs::write(fx.path().join("key.pem"), "not a key\n").unwrap();
    fx.write_config(
        &fx.loopback()
            .server("tls: { listen: 127.0.0.1:0, cert: cert.pem, key: key.pem }"),
    );
    let err = match bootpool::app::start(fx.config()).await {
        Ok(_) => panic!("started with a bad certificate"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("server.tls.cert"), "{err}");
    assert!(err.contains("cert.pem"), "{err}");
}

const SERVER: &str = "10.77.7.1";

/// The fixture's image and an NFS pool, served on the server end of `link` (HTTP on 8080).
fn netns_config(link: &Link) -> Loopback {
    Loopback::default()
        .on_veth("10.77.7", &link.server_if)
        .http("0.0.0.0:8080")
        .without_pool("nbd-room")
}

/// Runs curl in namespace `ns`: (succeeded, HTTP status).
fn curl_status(ns: &str, url: &str) -> (bool, String) {
    let (ok, code, _) = run(
        &mut Link::command(
            ns,
            "curl",
            &[
                "-sS",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                url,
            ],
        ),
        30,
    );
    (ok, code)
}

/// The recorded events, once one line holds all of `needles` (the writer batches), or what
/// was recorded when that did not happen.
fn events_with(fx: &Fixture, needles: &[&str]) -> String {
    let mut events = String::new();
    crate::common::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        events = crate::common::recorded_events(&fx.path().join("var"));
        events
            .lines()
            .any(|l| needles.iter().all(|n| l.contains(n)))
    });
    events
}

/// A client's boot script fetched by hand on the server (an admin looking at it, a probe) is
/// served but is no milestone of anybody's boot: only the client itself, from the address its
/// lease holds, moves its boot on. Before, every such fetch recorded a boot with no pool.
#[test]
fn a_script_fetched_by_someone_else_records_no_boot() {
    const CLIENT: &str = "52:54:00:77:00:03";
    const NEVER_BOOTED: &str = "52:54:00:77:00:04";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&netns_config(&link));
    let daemon = Daemon::start(&link, &fx, 1);
    let fetch = |ns: &str, mac: &str| {
        let url = format!("http://{SERVER}:8080/boot/script/{mac}.ipxe");
        let (ok, text, err) = run(
            &mut Link::command(ns, "curl", &["-sS", "--fail", "--max-time", "20", &url]),
            30,
        );
        assert!(ok, "{url}: {err}");
        assert!(text.starts_with("#!ipxe"), "{text}");
    };
    link.udhcpc(fx.path(), CLIENT, true)
        .expect("a lease for the client");
    // By hand, on the server: a machine that never booted, and the client.
    fetch(&link.server_ns, NEVER_BOOTED);
    fetch(&link.server_ns, CLIENT);
    // The client itself, from its leased address.
    fetch(&link.client_ns, CLIENT);
    let state = fx.path().join("var");
    let scripts = |events: &str| {
        events
            .lines()
            .filter(|l| l.contains("\"kind\":\"script\""))
            .count()
    };
    let mut events = String::new();
    crate::common::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        events = crate::common::recorded_events(&state);
        scripts(&events) > 0
    });
    // Events are recorded in order: the client's own fetch came last.
    assert_eq!(scripts(&events), 1, "{events}");
    assert!(!events.contains(NEVER_BOOTED), "{events}");
    let log = daemon.log_text();
    assert_eq!(
        log.matches("boot script fetched from an address that is not the client's")
            .count(),
        2,
        "{log}"
    );
    drop(daemon);
}

/// An initrd replaced by a symlink out of its image folder after the daemon started is not
/// served (404): the daemon's log says which file, where it points and why, and the boot of the
/// client that asked for it records why it failed. (At start, `check` and `serve` refuse such a
/// config: tests/it/cli.rs.)
#[test]
fn a_boot_file_linked_out_of_its_folder_is_refused_with_the_reason() {
    const CLIENT: &str = "52:54:00:77:00:05";
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&netns_config(&link));
    let daemon = Daemon::start(&link, &fx, 1);
    link.udhcpc(fx.path(), CLIENT, true)
        .expect("a lease for the client");
    let initrd = fx.image_dir().join("initrd.img");
    let elsewhere = fx.path().join("initrd-elsewhere.img");
    std::fs::rename(&initrd, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &initrd).unwrap();
    let url = format!("http://{SERVER}:8080/boot/demo/initrd.img");
    let (ok, code) = curl_status(&link.client_ns, &url);
    assert!(ok);
    assert_eq!(code, "404");
    let events = events_with(
        &fx,
        &["\"failed\"", "not served: a symlink out of its folder"],
    );
    assert!(
        events.lines().any(|l| l.contains("\"failed\"")
            && l.contains("/boot/demo/initrd.img: not served: a symlink out of its folder")),
        "{events}"
    );
    let log = daemon.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("boot file not served: a symlink out of its folder"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains(&initrd.display().to_string())
            && line.contains(&elsewhere.canonicalize().unwrap().display().to_string()),
        "{line}"
    );
    drop(daemon);
}
