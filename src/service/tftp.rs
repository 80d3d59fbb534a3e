//! TFTP service (being written).

use crate::config::Config;
use crate::record::Recorder;
use crate::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::UdpSocket;

pub async fn serve(
    socket: UdpSocket,
    config: Arc<Config>,
    recorder: Recorder,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let _ = (socket, config, recorder);
    shutdown.wait().await;
    Ok(())
}
