//! The portmapper (RFC 1833, version 2) as a pure function: one RPC call in, at most one reply
//! out. It answers NULL, GETPORT and DUMP from a fixed table; SET, UNSET and CALLIT are not
//! offered (nobody registers with us), other versions get PROG_MISMATCH and other programs
//! PROG_UNAVAIL. No I/O: `service::portmap` frames it for UDP and TCP, and `service::nfs`
//! uses it for GETPORT calls that arrive on the NFS port.

/// The well-known port clients ask (klibc's nfsmount asks no other).
pub const PORT: u16 = 111;
pub const PROG_PORTMAP: u32 = 100_000;
pub const VERS_PORTMAP: u32 = 2;
pub const PMAPPROC_NULL: u32 = 0;
pub const PMAPPROC_GETPORT: u32 = 3;
pub const PMAPPROC_DUMP: u32 = 4;
pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;
/// A call longer than this is not a portmapper call (GETPORT is 56 bytes plus credentials).
pub const MAX_CALL: usize = 1024;
/// RFC 5531: opaque_auth bodies are at most 400 bytes.
const MAX_AUTH: usize = 400;

/// One registration: program `prog` version `vers` over `prot` listens on `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    pub prot: u32,
    pub port: u32,
}

/// What a call asked for, once decoded; `reply` turns it into bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Null,
    GetPort(Mapping),
    Dump,
    /// The call was well formed but is not served; the reply says why.
    Refused(&'static str),
}

/// A reply, with what the call was for logging and counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub outcome: Outcome,
    pub reply: Vec<u8>,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (w, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*w))
    }
    fn auth(&mut self) -> Option<()> {
        self.u32()?;
        let len = self.u32()? as usize;
        if len > MAX_AUTH {
            return None;
        }
        self.0 = self.0.get(len.div_ceil(4) * 4..)?;
        Some(())
    }
}

fn put(out: &mut Vec<u8>, words: &[u32]) {
    for w in words {
        out.extend_from_slice(&w.to_be_bytes());
    }
}

/// xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, then `accept_stat`.
fn accepted(xid: u32, stat: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put(&mut out, &[xid, 1, 0, 0, 0, stat]);
    out
}

const SUCCESS: u32 = 0;
const PROG_UNAVAIL: u32 = 1;
const PROG_MISMATCH: u32 = 2;
const PROC_UNAVAIL: u32 = 3;
const GARBAGE_ARGS: u32 = 4;

/// Answers one RPC call (a whole record, without its record mark). `None`: not an RPC call at
/// all (no reply is possible; a TCP connection should be closed).
pub fn answer(call: &[u8], table: &[Mapping]) -> Option<Answer> {
    if call.len() > MAX_CALL {
        return None;
    }
    let mut r = Reader(call);
    let xid = r.u32()?;
    if r.u32()? != 0 {
        return None; // a REPLY: not ours to answer
    }
    let rpcvers = r.u32()?;
    let (prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?);
    r.auth()?;
    r.auth()?;
    if rpcvers != 2 {
        // MSG_DENIED, RPC_MISMATCH, supported 2..2.
        let mut reply = Vec::with_capacity(24);
        put(&mut reply, &[xid, 1, 1, 0, 2, 2]);
        return Some(Answer {
            outcome: Outcome::Refused("rpc version"),
            reply,
        });
    }
    let refused = |why, stat| Answer {
        outcome: Outcome::Refused(why),
        reply: accepted(xid, stat),
    };
    if prog != PROG_PORTMAP {
        return Some(refused("program", PROG_UNAVAIL));
    }
    if vers != VERS_PORTMAP {
        let mut a = refused("version", PROG_MISMATCH);
        put(&mut a.reply, &[VERS_PORTMAP, VERS_PORTMAP]);
        return Some(a);
    }
    let args = r.0;
    match proc_ {
        PMAPPROC_NULL if args.is_empty() => Some(Answer {
            outcome: Outcome::Null,
            reply: accepted(xid, SUCCESS),
        }),
        PMAPPROC_GETPORT if args.len() == 16 => {
            let mut a = Reader(args);
            let (prog, vers, prot) = (a.u32()?, a.u32()?, a.u32()?);
            // The caller's port field is ignored, as RFC 1833 says.
            let port = table
                .iter()
                .find(|m| m.prog == prog && m.vers == vers && m.prot == prot)
                .map_or(0, |m| m.port);
            let mut reply = accepted(xid, SUCCESS);
            put(&mut reply, &[port]);
            Some(Answer {
                outcome: Outcome::GetPort(Mapping {
                    prog,
                    vers,
                    prot,
                    port,
                }),
                reply,
            })
        }
        PMAPPROC_DUMP if args.is_empty() => {
            let mut reply = accepted(xid, SUCCESS);
            for m in table {
                // value-follows, then the mapping.
                put(&mut reply, &[1, m.prog, m.vers, m.prot, m.port]);
            }
            put(&mut reply, &[0]);
            Some(Answer {
                outcome: Outcome::Dump,
                reply,
            })
        }
        PMAPPROC_NULL | PMAPPROC_GETPORT | PMAPPROC_DUMP => {
            Some(refused("arguments", GARBAGE_ARGS))
        }
        _ => Some(refused("procedure", PROC_UNAVAIL)),
    }
}

/// The table served for an NFS port: MOUNT v3, NFS v3 and NFSACL v3 over TCP, and ourselves.
pub fn table(nfs_port: u16, portmap_port: u16) -> Vec<Mapping> {
    let m = |prog, vers, prot, port: u16| Mapping {
        prog,
        vers,
        prot,
        port: u32::from(port),
    };
    vec![
        m(PROG_PORTMAP, VERS_PORTMAP, IPPROTO_TCP, portmap_port),
        m(PROG_PORTMAP, VERS_PORTMAP, IPPROTO_UDP, portmap_port),
        m(100_005, 3, IPPROTO_TCP, nfs_port),
        m(100_003, 3, IPPROTO_TCP, nfs_port),
        m(super::rpc::PROG_NFSACL, 3, IPPROTO_TCP, nfs_port),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc_: u32, args: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        // AUTH_UNIX credential with a 12-byte body, AUTH_NONE verifier.
        put(
            &mut out,
            &[xid, 0, rpcvers, prog, vers, proc_, 1, 12, 7, 0, 0, 0, 0],
        );
        put(&mut out, args);
        out
    }

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn tbl() -> Vec<Mapping> {
        table(20049, 111)
    }

    #[test]
    fn getport_finds_mount_and_nfs_over_tcp_only() {
        for (prog, prot, port) in [
            (100_005, IPPROTO_TCP, 20049),
            (100_003, IPPROTO_TCP, 20049),
            (100_003, IPPROTO_UDP, 0),
            (100_021, IPPROTO_TCP, 0),
        ] {
            let a = answer(
                &call(9, 2, PROG_PORTMAP, 2, PMAPPROC_GETPORT, &[prog, 3, prot, 0]),
                &tbl(),
            )
            .unwrap();
            assert_eq!(words(&a.reply), [9, 1, 0, 0, 0, 0, port], "{prog} {prot}");
        }
        // Version 2 of NFS is not served.
        let a = answer(
            &call(9, 2, PROG_PORTMAP, 2, PMAPPROC_GETPORT, &[100_003, 2, 6, 0]),
            &tbl(),
        )
        .unwrap();
        assert_eq!(words(&a.reply).last(), Some(&0));
    }

    #[test]
    fn dump_lists_the_table() {
        let a = answer(&call(3, 2, PROG_PORTMAP, 2, PMAPPROC_DUMP, &[]), &tbl()).unwrap();
        let w = words(&a.reply);
        assert_eq!(&w[..6], [3, 1, 0, 0, 0, 0]);
        let mut expect = Vec::new();
        for m in tbl() {
            expect.extend([1, m.prog, m.vers, m.prot, m.port]);
        }
        expect.push(0);
        assert_eq!(&w[6..], expect);
        assert_eq!(a.outcome, Outcome::Dump);
    }

    #[test]
    fn null_and_refusals() {
        let a = answer(&call(1, 2, PROG_PORTMAP, 2, PMAPPROC_NULL, &[]), &tbl()).unwrap();
        assert_eq!(words(&a.reply), [1, 1, 0, 0, 0, 0]);
        // SET: not offered.
        let a = answer(&call(1, 2, PROG_PORTMAP, 2, 1, &[100_003, 3, 6, 1]), &tbl()).unwrap();
        assert_eq!(words(&a.reply), [1, 1, 0, 0, 0, PROC_UNAVAIL]);
        // rpcbind version 3: PROG_MISMATCH 2..2, so the client falls back to version 2.
        let a = answer(&call(1, 2, PROG_PORTMAP, 3, 3, &[]), &tbl()).unwrap();
        assert_eq!(words(&a.reply), [1, 1, 0, 0, 0, PROG_MISMATCH, 2, 2]);
        let a = answer(&call(1, 2, 100_003, 3, 0, &[]), &tbl()).unwrap();
        assert_eq!(words(&a.reply), [1, 1, 0, 0, 0, PROG_UNAVAIL]);
        let a = answer(&call(1, 3, PROG_PORTMAP, 2, 0, &[]), &tbl()).unwrap();
        assert_eq!(words(&a.reply), [1, 1, 1, 0, 2, 2]);
        // GETPORT with a short or long argument list.
        for args in [&[1u32, 2, 3][..], &[1, 2, 3, 4, 5]] {
            let a = answer(&call(1, 2, PROG_PORTMAP, 2, 3, args), &tbl()).unwrap();
            assert_eq!(words(&a.reply), [1, 1, 0, 0, 0, GARBAGE_ARGS]);
        }
        // A reply, a truncated header, an oversized credential: no answer at all.
        let mut reply = Vec::new();
        put(&mut reply, &[1, 1, 0, 0, 0, 0]);
        assert_eq!(answer(&reply, &tbl()), None);
        assert_eq!(answer(&[0, 0, 0, 1, 0, 0], &tbl()), None);
        let mut big = Vec::new();
        put(&mut big, &[1, 0, 2, PROG_PORTMAP, 2, 0, 1, 401]);
        big.resize(big.len() + 404, 0);
        put(&mut big, &[0, 0]);
        assert_eq!(answer(&big, &tbl()), None);
    }

    /// Random and mutated calls: any input gives None or a reply that starts with its xid.
    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let good = call(5, 2, PROG_PORTMAP, 2, PMAPPROC_GETPORT, &[100_003, 3, 6, 0]);
        let mut replies = 0;
        for _ in 0..20_000 {
            let mut b = if next() % 2 == 0 {
                good.clone()
            } else {
                (0..next() % 2048).map(|_| next() as u8).collect()
            };
            for _ in 0..next() % 4 {
                if b.is_empty() {
                    break;
                }
                let i = next() as usize % b.len();
                b[i] = next() as u8;
            }
            if next() % 3 == 0 {
                let keep = next() as usize % (b.len() + 1);
                b.truncate(keep);
            }
            if let Some(a) = answer(&b, &tbl()) {
                replies += 1;
                assert_eq!(a.reply[..4], b[..4]);
            }
        }
        assert!(
            replies > 0,
            "mutations of a good call should often still be answered"
        );
    }
}
