//! The instruments' wait for the daemon's wire copies: `bootpool lab` and `bootpool storm` ask
//! the images API (`GET /api/v1/images`) until no initrd or root copy is pending, so every
//! client of a run gets the same files.

/// The images whose initrd's or root's wire copy is still being made, from `GET
/// /api/v1/images`'s body.
pub fn wire_pending(body: &str) -> anyhow::Result<Vec<String>> {
    let images: Vec<serde_json::Value> = serde_json::from_str(body)?;
    Ok(images
        .iter()
        .filter(|i| i["initrd_wire"]["state"] == "pending" || i["root_wire"]["state"] == "pending")
        .filter_map(|i| i["image"].as_str().map(String::from))
        .collect())
}

/// Asks the images API (`fetch` returns its body) until no image's wire copy is pending,
/// for `WIRE_WAIT` at most, saying on stderr what it waits for (again every 30 s): `bootpool
/// lab` and `bootpool storm` (`who`) power their room on after it, so every client of a run
/// gets the same files. A first root copy takes minutes (the demo's: about one on one
/// niced core).
pub fn wait_while_wire_pending(
    who: &str,
    fetch: &mut dyn FnMut() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    const WIRE_WAIT: std::time::Duration = std::time::Duration::from_secs(900);
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    while started.elapsed() < WIRE_WAIT {
        let pending = wire_pending(&fetch()?)?;
        if pending.is_empty() {
            return Ok(());
        }
        if said.is_none_or(|at| at.elapsed().as_secs() >= 30) {
            eprintln!(
                "{who}: waiting for the wire copies (initrd, root image) of {} ({} s so far)",
                pending.join(", "),
                started.elapsed().as_secs()
            );
            said = Some(std::time::Instant::now());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    anyhow::bail!(
        "the wire copies were not made within {} s (see the daemon's log)",
        WIRE_WAIT.as_secs()
    )
}
