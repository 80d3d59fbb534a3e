//! The virtual room: a network namespace with a bridge and taps, `bootpool serve` inside it,
//! and N qemu clients that PXE-boot from it.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RootChoice {
    Nfs,
    Nbd,
}

#[derive(Debug, Args)]
pub struct LabArgs {
    /// How many virtual clients to power on at once.
    #[arg(long, default_value_t = 2)]
    pub clients: u32,
    /// The root filesystem protocol for the lab pool.
    #[arg(long, value_enum, default_value_t = RootChoice::Nfs)]
    pub root: RootChoice,
    /// The config whose images and settings the lab uses.
    #[arg(short, long, default_value = "pools.yaml")]
    pub config: PathBuf,
}

pub async fn run(args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("lab is not written yet ({args:?})")
}
