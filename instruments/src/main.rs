//! The `bootpool-instruments` command, which `bootpool lab`, `bootpool storm` and `bootpool
//! trace` run with their arguments: parses them, sets up logging and the runtime, enters the
//! lab's or the storm's private network namespace, and maps errors to exit codes.

#![forbid(unsafe_code)]

use bootpool_instruments::{lab, storm, trace};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Named `bootpool`: it answers as the command the daemon handed on (`bootpool storm --help`
/// reads as it always has).
#[derive(Parser)]
#[command(
    name = "bootpool",
    bin_name = "bootpool",
    version,
    about = "bootpool's instruments: the lab, the storm and the trace export"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot N virtual clients (qemu, PXE) against a config in an isolated network namespace.
    Lab(Box<lab::LabArgs>),
    /// Boot a whole room at once: N simulated clients replaying a real boot's trace, each on
    /// its own shaped link, against bootpool or another server, in a private network namespace.
    Storm(storm::args::StormArgs),
    /// List the boot traces kept for pools with `trace: true`, or export one (docs/trace.md).
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    bootpool::log_limit::to_stderr();
    let result = match cli.command {
        Command::Lab(args) => {
            // Before the runtime starts a thread: every thread and child must share the
            // lab's private network namespace.
            lab::net::enter_private_namespace().and_then(|()| {
                tokio::runtime::Runtime::new()
                    .map_err(|e| anyhow::anyhow!("cannot start runtime: {e}"))?
                    .block_on(lab::run(*args))
            })
        }
        Command::Storm(args) => {
            // Before the namespace: the ARP table's limits are the machine's, written from the
            // first namespace only, and a room of N clients needs N x N entries
            // (`storm::neigh`). Put back as the storm ends.
            let links = args.server_links.0 * args.servers.max(1);
            if let Err(e) = storm::neigh::raise(args.clients, links) {
                eprintln!("storm: the ARP table's limits stay as they are: {e:#}");
            }
            // Before any thread: the room's namespace is this process's.
            let result = lab::net::enter_private_namespace().and_then(|()| storm::run(args));
            storm::neigh::restore();
            result
        }
        Command::Trace(args) => trace::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
