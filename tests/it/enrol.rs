//! Unknown clients and their enrolment, with busybox udhcpc and curl against the `bootpool`
//! binary over a veth pair: a MAC no pool lists is silent but listed by `GET /api/v1/unknown`
//! and counted in /metrics; enrolled through `POST /api/v1/clients` or `bootpool client add`
//! (and taken out by `POST /api/v1/clients/MAC/remove` and `bootpool client remove`)
//! it gets an address at its next try, with no restart; a kill -9 keeps both the list and the
//! enrolments; a `discover` pool takes any unknown PC and enrols it; `bootpool check` refuses
//! a MAC given both in pools.yaml and in the enrolments file.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, run};
use std::process::Command;
use std::time::Duration;

const SERVER: &str = "10.77.4.1";
const ADMIN: &str = "0123456789abcdef-admin";
const READ: &str = "0123456789abcdef-read";
const STRANGER: &str = "52:54:00:99:00:01";
const SECOND: &str = "52:54:00:99:00:02";

/// The fixture on the server end of a veth, its API on port 18080 behind both tokens.
fn config(iface: &str) -> Loopback {
    Loopback::default()
        .on_veth("10.77.4", iface)
        .http(&format!("{SERVER}:18080"))
        .server(&format!("read_token: {READ}\nadmin_token: {ADMIN}"))
}

/// The address udhcpc as `mac` got, if any.
fn udhcpc(link: &Link, fx: &Fixture, mac: &str) -> Option<String> {
    let fields = link.udhcpc(fx.path(), mac, false)?;
    Some(fields[1].clone())
}

/// curl in the server's namespace: `method` on `path` with `token` and JSON `body`; the status
/// and the body.
fn curl(
    link: &Link,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (String, String) {
    let url = format!("http://{SERVER}:18080{path}");
    let auth = format!("Authorization: Bearer {token}");
    let mut args = vec![
        "-sS",
        "--max-time",
        "40",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
        "-H",
        &auth,
    ];
    if let Some(b) = body {
        args.extend(["-H", "Content-Type: application/json", "--data", b]);
    }
    args.push(&url);
    let out = Link::command(&link.server_ns, "curl", &args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    (code.to_string(), body.to_string())
}

/// The MACs `GET /api/v1/unknown` lists, with the whole answer.
fn unknown(link: &Link) -> (Vec<String>, serde_json::Value) {
    let (code, body) = curl(link, "GET", "/api/v1/unknown", READ, None);
    assert_eq!(code, "200", "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let macs = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["mac"].as_str().unwrap().to_string())
        .collect();
    (macs, list)
}

/// `bootpool client add` with `args`, for the fixture's config: success, stdout, stderr.
fn client_add(fx: &Fixture, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["client", "add", "--config"])
        .arg(fx.config_path())
        .args(args);
    run(&mut c, 60)
}

#[test]
fn an_unknown_pc_is_listed_then_enrolled_by_the_api_and_the_cli_and_a_kill_9_keeps_both() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if));
    let daemon = Daemon::start(&link, &fx, 1);

    // A stranger gets silence, and is listed with how it asked.
    assert_eq!(udhcpc(&link, &fx, STRANGER), None);
    let (macs, list) = unknown(&link);
    assert_eq!(macs, vec![STRANGER], "{list}");
    assert_eq!(list[0]["asked"], serde_json::json!(["dhcp"]), "{list}");
    assert!(list[0]["first_seen"].as_u64().unwrap() > 0, "{list}");
    let (_, metrics) = curl(&link, "GET", "/metrics", READ, None);
    assert!(
        metrics.contains("\nbootpool_unknown_clients 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nbootpool_dhcp_strangers_total "),
        "{metrics}"
    );
    // The list needs the read token; an enrolment the admin token.
    assert_eq!(
        curl(&link, "GET", "/api/v1/unknown", "wrong", None).0,
        "401"
    );
    let body = format!(r#"{{"mac":"{STRANGER}","pool":"nbd-room","name":"pc42"}}"#);
    assert_eq!(
        curl(&link, "POST", "/api/v1/clients", READ, Some(&body)).0,
        "401"
    );
    // No such pool: 409, nothing changed.
    let attic = format!(r#"{{"mac":"{STRANGER}","pool":"attic"}}"#);
    let (code, said) = curl(&link, "POST", "/api/v1/clients", ADMIN, Some(&attic));
    assert_eq!(code, "409", "{said}");
    assert!(said.contains("no pool `attic`"), "{said}");

    let (code, said) = curl(&link, "POST", "/api/v1/clients", ADMIN, Some(&body));
    assert_eq!(code, "200", "{said}");
    let enrolled: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(enrolled["pool"], "nbd-room", "{said}");
    let file = fx.path().join("var/enrolled.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&format!(
            "\"nbd-room\":\n  - {{ mac: \"{STRANGER}\", name: \"pc42\" }}"
        )),
        "{text}"
    );
    // Its next try gets an address, and it is no longer unknown; enrolling it again is 409.
    let ip = udhcpc(&link, &fx, STRANGER).expect("an address once enrolled");
    assert!(ip.starts_with("10.77.4."), "{ip}");
    assert!(unknown(&link).0.is_empty());
    assert_eq!(
        curl(&link, "POST", "/api/v1/clients", ADMIN, Some(&body)).0,
        "409"
    );

    // A second stranger, listed; then the daemon is killed without a chance to save.
    assert_eq!(udhcpc(&link, &fx, SECOND), None);
    assert_eq!(unknown(&link).0, vec![SECOND]);
    // The list is saved within a second of a change.
    std::thread::sleep(Duration::from_millis(1500));
    daemon.kill9();
    let daemon = Daemon::start(&link, &fx, 2);
    assert_eq!(unknown(&link).0, vec![SECOND], "the list survives kill -9");
    // `bootpool client unknown` prints the same list from the state folder.
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["client", "unknown", "--config"])
        .arg(fx.config_path());
    let (ok, out, err) = run(&mut c, 20);
    assert!(ok, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(SECOND))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(" dhcp "), "{out}");
    assert!(
        out.contains("1 unknown; enrol one with: bootpool client add"),
        "{out}"
    );
    assert_eq!(
        udhcpc(&link, &fx, STRANGER),
        Some(ip),
        "the enrolment survives kill -9"
    );

    // The CLI enrols the second one into the running daemon.
    let (ok, out, err) = client_add(&fx, &[SECOND, "--pool", "nfs-room"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("{SECOND} enrolled in pool nfs-room")),
        "{out}"
    );
    assert!(out.contains("reloaded by bootpool"), "{out}");
    assert!(udhcpc(&link, &fx, SECOND).is_some(), "enrolled by the CLI");
    assert!(unknown(&link).0.is_empty());
    // The reload the CLI asked for takes it off the list the gauge counts too.
    let gauge_empty =
        crate::common::poll_until(Duration::from_secs(5), Duration::from_millis(100), || {
            curl(&link, "GET", "/metrics", READ, None)
                .1
                .contains("\nbootpool_unknown_clients 0\n")
        });
    assert!(
        gauge_empty,
        "{}",
        curl(&link, "GET", "/metrics", READ, None).1
    );
    // Listed already: refused, exit 1, naming where.
    let (ok, _, err) = client_add(&fx, &[SECOND, "--pool", "nbd-room"]);
    assert!(!ok);
    assert!(err.contains("already listed in pool `nfs-room`"), "{err}");

    // Taken out again: by the API (the admin token), then by the CLI; each refused at its
    // next try, and a second removal refused naming the file.
    let route = format!("/api/v1/clients/{STRANGER}/remove");
    assert_eq!(curl(&link, "POST", &route, READ, None).0, "401");
    let (code, said) = curl(&link, "POST", &route, ADMIN, None);
    assert_eq!(code, "200", "{said}");
    assert_eq!(udhcpc(&link, &fx, STRANGER), None, "removed by the API");
    let (code, said) = curl(&link, "POST", &route, ADMIN, None);
    assert_eq!(code, "409", "{said}");
    assert!(said.contains("is not enrolled in"), "{said}");
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
    c.args(["client", "remove", SECOND, "--config"])
        .arg(fx.config_path());
    let (ok, out, err) = run(&mut c, 20);
    assert!(ok && out.contains("reloaded by bootpool"), "{out}{err}");
    assert_eq!(udhcpc(&link, &fx, SECOND), None, "removed by the CLI");
    drop(daemon);
}

#[test]
fn a_discover_pool_takes_an_unknown_pc_and_enrols_it() {
    let link = Link::new(&format!("{SERVER}/24"));
    let fx = Fixture::new();
    fx.write_config(&config(&link.server_if).pool("nbd-room", "discover: true"));
    let daemon = Daemon::start(&link, &fx, 1);
    let ip = udhcpc(&link, &fx, STRANGER).expect("a discover pool answers anyone");
    assert!(ip.starts_with("10.77.4."), "{ip}");
    let file = fx.path().join("var/enrolled.yaml");
    let enrolled =
        crate::common::poll_until(Duration::from_secs(20), Duration::from_millis(100), || {
            std::fs::read_to_string(&file).is_ok_and(|t| t.contains("name: \"52-54-00-99-00-01\""))
        });
    assert!(enrolled, "{}", daemon.log_text());
    assert!(unknown(&link).0.is_empty());
    drop(daemon);
    // Enrolled, it is a listed client of its pool: `check` reads the file too.
    let config = bootpool::config::Config::load(&fx.config_path()).unwrap();
    let m = config.listed(STRANGER.parse().unwrap()).expect("listed");
    assert_eq!(m.pool.name, "nbd-room");
}

#[test]
fn check_refuses_a_mac_in_both_files_and_a_second_discover_pool() {
    let fx = Fixture::new();
    let text = Loopback::default();
    fx.write_config(&text);
    std::fs::create_dir_all(fx.path().join("var")).unwrap();
    std::fs::write(
        fx.path().join("var/enrolled.yaml"),
        "nbd-room:\n  - { mac: \"52:54:00:77:00:03\", name: pc03 }\n",
    )
    .unwrap();
    let check = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bootpool"));
        c.args(["check", "--for-another-host", "--config"])
            .arg(fx.config_path());
        run(&mut c, 20)
    };
    let (ok, _, err) = check();
    assert!(!ok);
    assert!(
        err.contains("enrolled.yaml:2:")
            && err.contains("52:54:00:77:00:03 is already listed in pools.nfs-room.clients[0]"),
        "{err}"
    );
    fx.write_config(
        &text
            .pool("nfs-room", "discover: true")
            .pool("nbd-room", "discover: true"),
    );
    std::fs::remove_file(fx.path().join("var/enrolled.yaml")).unwrap();
    let (ok, _, err) = check();
    assert!(!ok);
    assert!(
        err.contains("pools.nfs-room.discover")
            && err.contains("pool `nbd-room` already says `discover: true`"),
        "{err}"
    );
}
