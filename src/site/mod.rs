//! A site: several `bootpool serve` sharing one PostgreSQL database (`server.database`), each
//! client answered by exactly one of them (docs/site.md).

pub mod balance;
pub mod conns;
pub mod db;
pub mod enrol_rows;
pub mod enrolments;
pub mod enrolments_db;
pub mod hash;
pub mod held;
pub mod keepalived;
pub mod lease6_rows;
pub mod lease_rows;
pub mod lease_spool;
pub mod leases6_db;
pub mod leases_db;
pub mod live;
pub mod member;
pub mod owners;
pub mod report;
pub mod root_sources;
pub mod shared_leases;
pub mod shared_leases6;
