//! The lease table as plain data: which MAC holds which address until when. The DHCP service
//! owns an instance and persists it; this file has no I/O.
