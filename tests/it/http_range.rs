//! HTTP boot files: byte ranges (curl `-r`, `-C -`) and conditional requests (ETag,
//! If-Modified-Since), driven by curl against the daemon on port 0.

use crate::common::{Fixture, pattern, run_async};
use std::process::Command;

/// curl with a header dump (`-D`) next to the body (`-o`).
async fn get(args: &[&str], url: &str, dir: &std::path::Path, n: u32) -> (String, Vec<u8>) {
    let head = dir.join(format!("h{n}"));
    let body = dir.join(format!("b{n}"));
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url);
    let (ok, _, err) = run_async(c, 30).await;
    assert!(ok, "{err}");
    let head = std::fs::read_to_string(&head).unwrap();
    (head, std::fs::read(&body).unwrap_or_default())
}

fn status(head: &str) -> &str {
    head.split_whitespace().nth(1).unwrap_or("")
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn ranges_and_conditionals_on_boot_files() {
    let fx = Fixture::new();
    let daemon = fx.start().await;
    let url = format!("http://{}/boot/demo/vmlinuz", daemon.bound.http);
    let kernel = pattern(1, 3 << 20);
    let len = kernel.len();
    let dir = fx.path();

    let (head, body) = get(&[], &url, dir, 0).await;
    assert_eq!(status(&head), "200", "{head}");
    assert_eq!(body, kernel);
    assert_eq!(header(&head, "accept-ranges"), Some("bytes"));
    let etag = header(&head, "etag").expect("an ETag").to_string();
    let modified = header(&head, "last-modified")
        .expect("Last-Modified")
        .to_string();

    // curl -r: a middle range, an open end, the last bytes.
    let (head, body) = get(&["-r", "1000-70999"], &url, dir, 1).await;
    assert_eq!(status(&head), "206", "{head}");
    assert_eq!(body, &kernel[1000..71000]);
    assert_eq!(
        header(&head, "content-range"),
        Some(format!("bytes 1000-70999/{len}").as_str())
    );
    let from = len - 12345;
    let (head, body) = get(&["-r", &format!("{from}-")], &url, dir, 2).await;
    assert_eq!(status(&head), "206", "{head}");
    assert_eq!(body, &kernel[from..]);
    let (_, body) = get(&["-r", "-100"], &url, dir, 3).await;
    assert_eq!(body, &kernel[len - 100..]);
    // Outside the file: 416 with the size.
    let (head, _) = get(&["-r", &format!("{len}-")], &url, dir, 4).await;
    assert_eq!(status(&head), "416", "{head}");
    assert_eq!(
        header(&head, "content-range"),
        Some(format!("bytes */{len}").as_str())
    );

    // A resumed download (curl -C -) ends with the whole file.
    let partial = dir.join("resumed");
    std::fs::write(&partial, &kernel[..777_777]).unwrap();
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "-C", "-", "-o"])
        .arg(&partial)
        .arg(&url);
    let (ok, _, err) = run_async(c, 30).await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&partial).unwrap(), kernel);

    // Conditionals: the current tag or date gets 304 and no body; a stale one the file.
    let inm = format!("If-None-Match: {etag}");
    let (head, body) = get(&["-H", &inm], &url, dir, 5).await;
    assert_eq!(status(&head), "304", "{head}");
    assert!(body.is_empty());
    let ims = format!("If-Modified-Since: {modified}");
    let (head, _) = get(&["-H", &ims], &url, dir, 6).await;
    assert_eq!(status(&head), "304", "{head}");
    let (head, body) = get(&["-H", "If-None-Match: \"stale\""], &url, dir, 7).await;
    assert_eq!(status(&head), "200", "{head}");
    assert_eq!(body.len(), len);
    // If-Range with a stale tag: the whole file, not a spliced range.
    let (head, body) = get(&["-r", "0-9", "-H", "If-Range: \"stale\""], &url, dir, 8).await;
    assert_eq!(status(&head), "200", "{head}");
    assert_eq!(body, kernel);
    let ir = format!("If-Range: {etag}");
    let (head, body) = get(&["-r", "0-9", "-H", &ir], &url, dir, 9).await;
    assert_eq!(status(&head), "206", "{head}");
    assert_eq!(body, &kernel[..10]);
    daemon.stop().await;
}
