//! Who reads the dashboard, the API, the consoles and /metrics (docs/security.md, "The API"),
//! tried with curl from the outside: the daemon in one network namespace, curl in another
//! (a veth between them) from an address of the client subnet and from one of another
//! network, and curl on the server host. By default only the host reads; the clients' subnet
//! never does without the read token, even inside `server.admin_networks`, which opens its
//! other addresses; `server.metrics_open` opens /metrics alone; the routes a member pulls
//! revisions by are read routes like the others. Needs root.

use crate::common::netns::{Daemon, Link};
use crate::common::{Fixture, Loopback, run};
use std::time::Duration;

const SERVER: &str = "10.77.4.1";
/// An address of the client subnet (no lease: a user's laptop on the room's network).
const CLIENT: &str = "10.77.4.60";
/// An address of another network, which the server also has a leg on.
const ADMIN: &str = "10.88.4.2";
const READ: &str = "read-access-token-0123";
/// The routes another server pulls a revision by (`bootpool image pull`).
const PULL_MANIFEST: &str = "/api/v1/images/demo/revs/active/manifest";
const PULL_OBJECT: &str = "/api/v1/images/demo/objects/sha256/0000000000000000000000000000000000000000000000000000000000000000";

fn config(iface: &str, server_keys: &str) -> Loopback {
    let c = Loopback::default()
        .on_veth("10.77.4", iface)
        .http("0.0.0.0:8080");
    if server_keys.is_empty() {
        c
    } else {
        c.server(server_keys)
    }
}

/// The HTTP status of GET `path` from the client namespace, sent from `from`, with `token`.
fn status_from(link: &Link, from: &str, path: &str, token: Option<&str>) -> String {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let url = format!("http://{SERVER}:8080{path}");
    let mut args = vec![
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
        "--interface",
        from,
    ];
    if let Some(a) = &auth {
        args.extend(["-H", a.as_str()]);
    }
    args.push(&url);
    let (_, out, _) = run(&mut Link::command(&link.client_ns, "curl", &args), 30);
    out.trim().to_string()
}

/// The HTTP status of GET `path` on the server host itself.
fn status_on_host(link: &Link, path: &str) -> String {
    let url = format!("http://{SERVER}:8080{path}");
    let args = [
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
        &url,
    ];
    let (_, out, _) = run(&mut Link::command(&link.server_ns, "curl", &args), 30);
    out.trim().to_string()
}

fn log_says(daemon: &Daemon, text: &str) -> bool {
    crate::common::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        daemon.log_text().contains(text)
    })
}

#[test]
fn the_read_side_is_the_hosts_the_admin_networks_and_the_tokens_never_a_client_subnets() {
    let link = Link::new(&format!("{SERVER}/24"));
    link.in_server(&["ip", "addr", "add", "10.88.4.1/24", "dev", &link.server_if]);
    link.in_client(&[
        "ip",
        "addr",
        "add",
        &format!("{CLIENT}/24"),
        "dev",
        &link.client_if,
    ]);
    link.in_client(&[
        "ip",
        "addr",
        "add",
        &format!("{ADMIN}/24"),
        "dev",
        &link.client_if,
    ]);
    let fx = Fixture::new();
    let read_paths = [
        "/api/v1/boots",
        "/api/v1/boots/1/console",
        "/api/v1/pools",
        "/",
        "/metrics",
        PULL_MANIFEST,
        PULL_OBJECT,
    ];

    // The default: the server host alone, and the log says how to open it.
    fx.write_config(&config(&link.server_if, ""));
    let daemon = Daemon::start(&link, &fx, 1);
    assert!(
        log_says(
            &daemon,
            "to read them from elsewhere, set server.admin_networks"
        ),
        "{}",
        daemon.log_text()
    );
    for path in read_paths {
        assert_eq!(status_from(&link, CLIENT, path, None), "403", "{path}");
        assert_eq!(status_from(&link, ADMIN, path, None), "403", "{path}");
    }
    for path in ["/api/v1/boots", "/api/v1/pools", "/", "/metrics"] {
        assert_eq!(status_on_host(&link, path), "200", "{path}");
    }
    // What a booting client needs stays open: its boot files.
    assert_eq!(
        status_from(&link, CLIENT, "/boot/demo/vmlinuz", None),
        "200"
    );
    drop(daemon);

    // Admin networks that contain the client subnet, a read token, /metrics open.
    fx.write_config(&config(
        &link.server_if,
        &format!(
            "admin_networks: [10.88.4.0/24, 10.77.0.0/16]\nread_token: {READ}\nmetrics_open: true"
        ),
    ));
    let daemon = Daemon::start(&link, &fx, 2);
    assert!(
        log_says(&daemon, "never from a client subnet"),
        "{}",
        daemon.log_text()
    );
    for path in ["/api/v1/boots", "/api/v1/pools", "/"] {
        assert_eq!(status_from(&link, ADMIN, path, None), "200", "{path}");
        assert_eq!(status_from(&link, CLIENT, path, None), "401", "{path}");
        assert_eq!(
            status_from(&link, CLIENT, path, Some("not-the-read-token-01")),
            "401",
            "{path}"
        );
        assert_eq!(
            status_from(&link, CLIENT, path, Some(READ)),
            "200",
            "{path}"
        );
        assert_eq!(status_on_host(&link, path), "200", "{path}");
    }
    assert_eq!(status_from(&link, CLIENT, "/metrics", None), "200");
    // What a member pulls a revision by: a client subnet never without the token (with it the
    // guard lets the request through: the hand-made image has no revision, so 404).
    for path in [PULL_MANIFEST, PULL_OBJECT] {
        assert_eq!(status_from(&link, CLIENT, path, None), "401", "{path}");
        assert_eq!(
            status_from(&link, CLIENT, path, Some(READ)),
            "404",
            "{path}"
        );
        assert_eq!(status_from(&link, ADMIN, path, None), "404", "{path}");
    }
    drop(daemon);
}
