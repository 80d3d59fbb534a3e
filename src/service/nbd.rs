//! NBD service (being written).

use crate::config::Config;
use crate::record::Recorder;
use crate::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;

pub async fn serve(
    listener: TcpListener,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let _ = (listener, config, recorder);
    shutdown.wait().await;
    Ok(())
}
