//! The integration tests, one binary: each module below was a test file of its own, and
//! `common` is their shared harness (the loopback fixture, network namespaces, RPC and NBD
//! clients, the lab's config). Select a module by its path: `cargo test --test it tftp::`
//! (a filter matches anywhere in the name: `nfs::` also selects `trust_nfs::`).
//! The VM boots are the `e2e` modules; `scripts/test` runs each of those alone, after the rest,
//! so that no VM shares the cores with other tests.

mod common;

mod addition;
mod blocks;
mod cli;
mod console;
mod dashboard;
mod decode_random;
mod dhcp;
mod dhcp6;
mod dhcp_perfdhcp;
mod dist;
mod e2e;
mod e2e_agent_root;
mod e2e_arm64;
mod e2e_campus;
mod e2e_console;
mod e2e_cow;
mod e2e_failover;
mod e2e_gone;
mod e2e_homes;
mod e2e_images;
mod e2e_ipv6;
mod e2e_next_boot;
mod e2e_proxy;
mod e2e_reload;
mod e2e_restart;
mod e2e_secure_boot;
mod e2e_site;
mod e2e_stock;
mod e2e_stock_image;
mod e2e_swarm;
mod e2e_switch;
mod e2e_uefi;
mod e2e_wake;
mod enrol;
mod failover;
mod homes;
mod http;
mod http_range;
mod image_import;
mod image_names;
mod image_pull;
mod image_revisions;
mod image_store;
mod initrd_wire;
mod instruments;
mod limits;
mod links;
mod metrics;
mod nbd;
mod next_boot;
mod nfs;
mod read_access;
mod records;
mod records_postgres;
mod relay;
mod reload;
mod restart;
mod root_wire;
mod siege;
mod site;
mod site_leases_db;
mod site_revisions;
mod state;
mod storm;
mod storm_replay;
mod swarm;
mod tftp;
mod tickle;
mod trust;
mod trust_nfs;
mod wake;
