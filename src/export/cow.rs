//! Per-client copy-on-write over a read-only base image: a map of 4 KiB blocks (base, written,
//! zeroed) and the storage for written blocks, in memory or in a sparse file. The base is never
//! written. No sockets, no clock, no policy: who gets an overlay and when it is dropped is the
//! NBD service's business.
//!
//! On disk an overlay is two files in the folder it is given: `KEY.data`, sparse, as long as
//! the image, a written block at the block's own offset; and `KEY.map`, a header (magic, image
//! size, the client's boot) then one byte per block (0 base, 1 written, 2 zero). Data goes
//! before its map byte, so a crash loses at most unflushed writes, which NBD allows.
//!
//! The bound counts written blocks; zeroed blocks hold no storage (holes are punched), so a
//! client can never hold more than `limit` bytes however it mixes writes and trims. An overlay
//! may also draw on a `Budget` shared with other clients' overlays (`limits.cow_ram_total`,
//! `limits.cow_disk_total`): a write that would take the budget past its bound fails the same
//! way, changing nothing, and an overlay gives its blocks back when it is dropped.

use super::image::ReadAt;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Overlay granularity: the page size, and what ext4 images are made with.
pub const BLOCK: u64 = 4096;
const MAGIC: &[u8; 8] = b"BPCOW\x001\n";
const HEADER: u64 = 24;
const NO_BOOT: i64 = i64::MIN;

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum CowError {
    /// The client's bound would be exceeded; nothing was changed. Answered ENOSPC.
    #[error("copy-on-write bound reached")]
    NoSpace,
    /// The bound shared by every client's overlay would be exceeded; nothing was changed.
    /// Answered ENOSPC.
    #[error("copy-on-write total bound reached")]
    TotalFull,
    #[error("{0}")]
    Io(#[from] io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Written,
    Zero,
}

impl Slot {
    fn byte(self) -> u8 {
        match self {
            Slot::Written => 1,
            Slot::Zero => 2,
        }
    }
}

#[derive(Debug)]
enum Backing {
    Ram(HashMap<u64, Box<[u8]>>),
    Disk { data: File, map: File },
}

/// Blocks that a set of overlays may hold together.
#[derive(Debug)]
pub struct Budget {
    cap_blocks: u64,
    used: std::sync::atomic::AtomicU64,
}

impl Budget {
    pub fn new(cap_bytes: u64) -> std::sync::Arc<Budget> {
        std::sync::Arc::new(Budget {
            cap_blocks: cap_bytes / BLOCK,
            used: Default::default(),
        })
    }

    /// Bytes of written blocks held by the overlays drawing on it.
    pub fn used(&self) -> u64 {
        self.used.load(std::sync::atomic::Ordering::Relaxed) * BLOCK
    }

    pub fn cap(&self) -> u64 {
        self.cap_blocks * BLOCK
    }

    fn take(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.used
            .fetch_update(Relaxed, Relaxed, |u| {
                u.checked_add(n).filter(|t| *t <= self.cap_blocks)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .used
            .fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_sub(n)));
    }
}

/// One client's writes over one image.
#[derive(Debug)]
pub struct Overlay {
    /// Shared with other clients' overlays, if any.
    budget: Option<std::sync::Arc<Budget>>,
    size: u64,
    limit_blocks: u64,
    /// Blocks that differ from the base; absent means "read the base".
    map: HashMap<u64, Slot>,
    written: u64,
    backing: Backing,
    boot: Option<i64>,
}

/// The files of the overlay `key` in `dir`.
pub fn paths(dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{key}.data")),
        dir.join(format!("{key}.map")),
    )
}

/// Deletes the overlay `key` in `dir`; a missing file is no error.
pub fn remove(dir: &Path, key: &str) -> io::Result<()> {
    for p in <[PathBuf; 2]>::from(paths(dir, key)) {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Keys of the overlays kept in `dir` (one per `.map` file).
pub fn keys_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".map").map(str::to_string))
        .collect();
    keys.sort();
    keys
}

impl Overlay {
    /// An empty overlay in memory for an image of `size` bytes.
    pub fn ram(size: u64, limit: u64, boot: Option<i64>) -> Overlay {
        Overlay {
            budget: None,
            size,
            limit_blocks: limit / BLOCK,
            map: HashMap::new(),
            written: 0,
            backing: Backing::Ram(HashMap::new()),
            boot,
        }
    }

    /// The overlay `key` in `dir`: reopened if its files exist and were made for an image of
    /// this size, otherwise started empty. Returns it and whether it was reopened.
    pub fn disk(
        dir: &Path,
        key: &str,
        size: u64,
        limit: u64,
        boot: Option<i64>,
    ) -> io::Result<(Overlay, bool)> {
        std::fs::create_dir_all(dir)?;
        let (data_path, map_path) = paths(dir, key);
        if let Some(o) = Self::reopen(&data_path, &map_path, size, limit)? {
            return Ok((o, true));
        }
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(p)
        };
        let data = open(&data_path)?;
        data.set_len(size)?;
        let map = open(&map_path)?;
        let blocks = size.div_ceil(BLOCK);
        map.set_len(HEADER + blocks)?;
        let mut h = [0u8; HEADER as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..16].copy_from_slice(&size.to_be_bytes());
        h[16..].copy_from_slice(&boot.unwrap_or(NO_BOOT).to_be_bytes());
        map.write_all_at(&h, 0)?;
        Ok((
            Overlay {
                budget: None,
                size,
                limit_blocks: limit / BLOCK,
                map: HashMap::new(),
                written: 0,
                backing: Backing::Disk { data, map },
                boot,
            },
            false,
        ))
    }

    fn reopen(data: &Path, map: &Path, size: u64, limit: u64) -> io::Result<Option<Overlay>> {
        let (Ok(data), Ok(mapf)) = (
            OpenOptions::new().read(true).write(true).open(data),
            OpenOptions::new().read(true).write(true).open(map),
        ) else {
            return Ok(None);
        };
        let bytes = std::fs::read(map)?;
        let blocks = size.div_ceil(BLOCK);
        if bytes.len() as u64 != HEADER + blocks
            || &bytes[..8] != MAGIC
            || bytes[8..16] != size.to_be_bytes()
            || data.metadata()?.len() != size
        {
            return Ok(None);
        }
        let boot = i64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes"));
        let mut o = Overlay {
            budget: None,
            size,
            limit_blocks: limit / BLOCK,
            map: HashMap::new(),
            written: 0,
            backing: Backing::Disk { data, map: mapf },
            boot: (boot != NO_BOOT).then_some(boot),
        };
        for (b, &v) in bytes[HEADER as usize..].iter().enumerate() {
            match v {
                0 => {}
                1 => {
                    o.map.insert(b as u64, Slot::Written);
                    o.written += 1;
                }
                2 => {
                    o.map.insert(b as u64, Slot::Zero);
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(o))
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Draws this overlay's blocks from `budget`, shared with other overlays. What it holds
    /// already (a reopened overlay) is counted even past the bound: it was written before.
    pub fn with_budget(mut self, budget: std::sync::Arc<Budget>) -> Overlay {
        budget
            .used
            .fetch_add(self.written, std::sync::atomic::Ordering::Relaxed);
        self.budget = Some(budget);
        self
    }

    /// The boot (its start, in the records' microseconds) this overlay was made for.
    pub fn boot(&self) -> Option<i64> {
        self.boot
    }

    /// Bytes of written blocks held.
    pub fn used(&self) -> u64 {
        self.written * BLOCK
    }

    fn block_len(&self, b: u64) -> usize {
        BLOCK.min(self.size - b * BLOCK) as usize
    }

    fn check(&self, offset: u64, len: u64) -> io::Result<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(end),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "past the end of the image",
            )),
        }
    }

    /// Whether `len` bytes at `offset` are all the base's (no block of them written or
    /// zeroed here): such a read may be served from the base alone.
    pub fn untouched(&self, offset: u64, len: u64) -> bool {
        if self.map.is_empty() || len == 0 {
            return true;
        }
        let last = (offset.saturating_add(len) - 1) / BLOCK;
        (offset / BLOCK..=last).all(|b| !self.map.contains_key(&b))
    }

    /// Fills `buf` from `offset`: written blocks from the overlay, zeroed ones with zeroes,
    /// the rest from `base`. Runs of one kind are read in one go.
    pub fn read(&self, base: &dyn ReadAt, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = self.check(offset, buf.len() as u64)?;
        if self.map.is_empty() {
            return base.read_at(buf, offset);
        }
        let mut pos = offset;
        while pos < end {
            let slot = self.map.get(&(pos / BLOCK)).copied();
            // Extend the run while the following blocks are of the same kind.
            let mut run_end = ((pos / BLOCK + 1) * BLOCK).min(end);
            while run_end < end && self.map.get(&(run_end / BLOCK)).copied() == slot {
                run_end = (run_end + BLOCK).min(end);
            }
            let out = &mut buf[(pos - offset) as usize..(run_end - offset) as usize];
            match slot {
                None => base.read_at(out, pos)?,
                Some(Slot::Zero) => out.fill(0),
                Some(Slot::Written) => self.read_written(out, pos)?,
            }
            pos = run_end;
        }
        Ok(())
    }

    fn read_written(&self, out: &mut [u8], pos: u64) -> io::Result<()> {
        match &self.backing {
            Backing::Disk { data, .. } => data.read_exact_at(out, pos),
            Backing::Ram(blocks) => {
                let mut done = 0;
                while done < out.len() {
                    let at = pos + done as u64;
                    let b = blocks
                        .get(&(at / BLOCK))
                        .ok_or_else(|| io::Error::other("overlay map and storage disagree"))?;
                    let from = (at % BLOCK) as usize;
                    let n = (b.len() - from).min(out.len() - done);
                    out[done..done + n].copy_from_slice(&b[from..from + n]);
                    done += n;
                }
                Ok(())
            }
        }
    }

    /// Writes `data` at `offset`. Partial blocks are completed from what the client saw
    /// before. Fails with `NoSpace`, changing nothing, if the bound would be passed.
    pub fn write(&mut self, base: &dyn ReadAt, data: &[u8], offset: u64) -> Result<(), CowError> {
        let end = self.check(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
        let fresh = (first..=last)
            .filter(|b| self.map.get(b) != Some(&Slot::Written))
            .count() as u64;
        if self.written + fresh > self.limit_blocks {
            return Err(CowError::NoSpace);
        }
        if let Some(b) = &self.budget
            && !b.take(fresh)
        {
            return Err(CowError::TotalFull);
        }
        let before = self.written;
        let done = self.write_blocks(base, data, offset, end, first, last);
        // Give back what was reserved and not used (an I/O error part way).
        if let Some(b) = &self.budget {
            b.give(fresh - (self.written - before));
        }
        done
    }

    fn write_blocks(
        &mut self,
        base: &dyn ReadAt,
        data: &[u8],
        offset: u64,
        end: u64,
        first: u64,
        last: u64,
    ) -> Result<(), CowError> {
        let start = first * BLOCK;
        let stop = (start + (last - first + 1) * BLOCK).min(self.size);
        if offset == start && end == stop {
            return Ok(self.put(first, data)?);
        }
        // Unaligned: complete the head and tail blocks from the current contents.
        let mut whole = vec![0; (stop - start) as usize];
        let head = self.block_len(first);
        self.read(base, &mut whole[..head], start)?;
        if last != first {
            let at = ((last - first) * BLOCK) as usize;
            self.read(base, &mut whole[at..], last * BLOCK)?;
        }
        whole[(offset - start) as usize..][..data.len()].copy_from_slice(data);
        Ok(self.put(first, &whole)?)
    }

    /// Stores whole blocks from `first` on (the last may be the image's short tail block).
    fn put(&mut self, first: u64, bytes: &[u8]) -> io::Result<()> {
        let n = bytes.len().div_ceil(BLOCK as usize) as u64;
        match &mut self.backing {
            Backing::Disk { data, map } => {
                data.write_all_at(bytes, first * BLOCK)?;
                map.write_all_at(&vec![Slot::Written.byte(); n as usize], HEADER + first)?;
            }
            Backing::Ram(blocks) => {
                for (i, chunk) in bytes.chunks(BLOCK as usize).enumerate() {
                    blocks.insert(first + i as u64, chunk.into());
                }
            }
        }
        for b in first..first + n {
            if self.map.insert(b, Slot::Written) != Some(Slot::Written) {
                self.written += 1;
            }
        }
        Ok(())
    }

    /// Marks the whole blocks in `[first, first + n)` as zero and frees their storage.
    fn zero_blocks(&mut self, first: u64, n: u64) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        match &mut self.backing {
            Backing::Disk { data, map } => {
                let len = (n * BLOCK).min(self.size - first * BLOCK);
                punch_hole(data, first * BLOCK, len);
                map.write_all_at(&vec![Slot::Zero.byte(); n as usize], HEADER + first)?;
            }
            Backing::Ram(blocks) => {
                for b in first..first + n {
                    blocks.remove(&b);
                }
            }
        }
        for b in first..first + n {
            if self.map.insert(b, Slot::Zero) == Some(Slot::Written) {
                self.written -= 1;
                if let Some(b) = &self.budget {
                    b.give(1);
                }
            }
        }
        Ok(())
    }

    /// The whole blocks inside `[offset, end)`, as (first, count).
    fn inner_blocks(&self, offset: u64, end: u64) -> (u64, u64) {
        let first = offset.div_ceil(BLOCK);
        // The image's short tail block counts as whole when the range reaches the end.
        let stop = if end == self.size {
            self.size.div_ceil(BLOCK)
        } else {
            end / BLOCK
        };
        (first, stop.saturating_sub(first))
    }

    /// NBD_CMD_WRITE_ZEROES: whole blocks become zero (freeing storage); partial ones are
    /// written with zeroes unless already zero.
    pub fn write_zeroes(
        &mut self,
        base: &dyn ReadAt,
        offset: u64,
        len: u64,
    ) -> Result<(), CowError> {
        let end = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let (first, n) = self.inner_blocks(offset, end);
        self.zero_blocks(first, n)?;
        let inner = (first * BLOCK, ((first + n) * BLOCK).min(self.size));
        let edges = if n == 0 {
            [(offset, end), (end, end)]
        } else {
            [(offset, inner.0), (inner.1, end)]
        };
        // Each edge is split at block boundaries: a zero block needs no write, its
        // neighbour may.
        for (from, to) in edges {
            let mut pos = from;
            while pos < to {
                let stop = ((pos / BLOCK + 1) * BLOCK).min(to);
                if self.map.get(&(pos / BLOCK)) != Some(&Slot::Zero) {
                    self.write(base, &vec![0; (stop - pos) as usize], pos)?;
                }
                pos = stop;
            }
        }
        Ok(())
    }

    /// NBD_CMD_TRIM: whole blocks read as zero afterwards and hold no storage; the protocol
    /// leaves partial blocks as they are.
    pub fn trim(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let end = self.check(offset, len)?;
        let (first, n) = self.inner_blocks(offset, end);
        self.zero_blocks(first, n)
    }

    /// Makes every completed write durable (a no-op in memory).
    pub fn flush(&self) -> io::Result<()> {
        match &self.backing {
            Backing::Disk { data, map } => {
                data.sync_data()?;
                map.sync_data()
            }
            Backing::Ram(_) => Ok(()),
        }
    }
}

/// Frees a range of the data file. Best effort: where holes are unsupported the blocks stay
/// allocated, and the map still says zero, so reads are right either way.
impl Drop for Overlay {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.written);
        }
    }
}

fn punch_hole(file: &File, offset: u64, len: u64) {
    let _ = crate::sys::fs::fallocate(
        std::os::fd::AsFd::as_fd(file),
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset,
        len,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8 + 1).collect()
    }

    /// A plain copy of what the client should see, updated alongside the overlay.
    fn both(size: usize, limit: u64) -> Vec<(Overlay, tempfile::TempDir)> {
        let dir = tempfile::tempdir().unwrap();
        let disk = Overlay::disk(dir.path(), "c", size as u64, limit, Some(7))
            .unwrap()
            .0;
        vec![
            (
                Overlay::ram(size as u64, limit, None),
                tempfile::tempdir().unwrap(),
            ),
            (disk, dir),
        ]
    }

    fn read_all(o: &Overlay, b: &Vec<u8>) -> Vec<u8> {
        let mut out = vec![0xee; o.size() as usize];
        o.read(b, &mut out, 0).unwrap();
        out
    }

    #[test]
    fn untouched_names_the_ranges_only_the_base_holds() {
        let size = 10 * BLOCK as usize;
        let b = base(size);
        for (mut o, _dir) in both(size, 1 << 20) {
            assert!(o.untouched(0, size as u64), "nothing written yet");
            o.write(&b, &[9; 10], 5000).unwrap(); // block 1
            o.trim(6 * BLOCK, BLOCK).unwrap(); // block 6, zeroed
            assert!(o.untouched(0, BLOCK));
            assert!(!o.untouched(BLOCK - 1, 2), "one byte into block 1");
            assert!(o.untouched(2 * BLOCK, 4 * BLOCK));
            assert!(
                !o.untouched(2 * BLOCK, 4 * BLOCK + 1),
                "one byte into block 6"
            );
            assert!(o.untouched(7 * BLOCK, 3 * BLOCK));
            assert!(o.untouched(3 * BLOCK, 0));
        }
    }

    #[test]
    fn reads_come_from_the_base_until_written_and_the_base_is_untouched() {
        // A size that is not a block multiple exercises the short tail block.
        let size = 10 * BLOCK as usize + 100;
        let b = base(size);
        for (mut o, _dir) in both(size, 1 << 20) {
            assert_eq!(read_all(&o, &b), b);
            let mut model = b.clone();
            for (off, len, fill) in [
                (0usize, 4096usize, 1u8), // one aligned block
                (5000, 10, 2),            // inside one block
                (4000, 9000, 3),          // across three blocks, unaligned both ends
                (size - 50, 50, 4),       // the short tail block
                (2 * 4096, 3 * 4096, 5),  // aligned run over written blocks
            ] {
                let data = vec![fill; len];
                o.write(&b, &data, off as u64).unwrap();
                model[off..off + len].copy_from_slice(&data);
                assert_eq!(read_all(&o, &b), model, "after write at {off}+{len}");
                // An unaligned read in the middle agrees too.
                let mut part = vec![0; 7000];
                o.read(&b, &mut part, 3000).unwrap();
                assert_eq!(part, model[3000..10000]);
            }
            assert_eq!(b, base(size), "the base is never written");
        }
    }

    #[test]
    fn trim_and_write_zeroes_read_as_zero_and_free_storage() {
        let size = 8 * BLOCK as usize;
        let b = base(size);
        for (mut o, _dir) in both(size, 1 << 20) {
            let mut model = b.clone();
            o.write(&b, &vec![9; size], 0).unwrap();
            model.fill(9);
            assert_eq!(o.used(), 8 * BLOCK);
            // Zeroes over 1.5 blocks: one whole block freed, half a block written.
            o.write_zeroes(&b, 4096, 6144).unwrap();
            model[4096..4096 + 6144].fill(0);
            assert_eq!(read_all(&o, &b), model);
            assert_eq!(o.used(), 7 * BLOCK);
            // Zeroes inside a base block: that block becomes written.
            o.trim(0, size as u64).unwrap();
            model.fill(0);
            assert_eq!(read_all(&o, &b), model);
            assert_eq!(o.used(), 0);
            // Trim inside one block changes nothing.
            o.write(&b, &[5; 100], 0).unwrap();
            model[..100].fill(5);
            o.trim(10, 20).unwrap();
            assert_eq!(read_all(&o, &b), model);
            // Zeroes over part of a zero block need no storage.
            let used = o.used();
            o.write_zeroes(&b, 5000, 10).unwrap();
            assert_eq!(o.used(), used);
            assert_eq!(read_all(&o, &b), model);
        }
    }

    #[test]
    fn the_bound_refuses_new_blocks_and_changes_nothing() {
        let size = 16 * BLOCK as usize;
        let b = base(size);
        for (mut o, _dir) in both(size, 4 * BLOCK) {
            o.write(&b, &[1; 4 * 4096], 0).unwrap();
            let before = read_all(&o, &b);
            // One more block, even one byte of it, is past the bound.
            assert!(matches!(
                o.write(&b, &[2], 4 * 4096),
                Err(CowError::NoSpace)
            ));
            assert!(matches!(
                o.write(&b, &[2; 8192], 3 * 4096),
                Err(CowError::NoSpace)
            ));
            // A zeroing that needs a new partial block is refused as well.
            assert!(matches!(
                o.write_zeroes(&b, 9 * 4096 + 1, 10),
                Err(CowError::NoSpace)
            ));
            assert_eq!(read_all(&o, &b), before);
            // Rewriting held blocks is fine; freeing some makes room again.
            o.write(&b, &[3; 100], 0).unwrap();
            o.trim(0, 4096).unwrap();
            o.write(&b, &[4; 4096], 10 * 4096).unwrap();
            assert_eq!(o.used(), 4 * BLOCK);
        }
    }

    #[test]
    fn out_of_range_requests_are_errors() {
        let b = base(8192);
        for (mut o, _dir) in both(8192, 1 << 20) {
            let mut buf = [0; 10];
            assert!(o.read(&b, &mut buf, 8190).is_err());
            assert!(o.read(&b, &mut buf, u64::MAX - 3).is_err());
            assert!(o.write(&b, &buf, 8190).is_err());
            assert!(o.write_zeroes(&b, u64::MAX, 2).is_err());
            assert!(o.trim(8000, 500).is_err());
        }
    }

    #[test]
    fn a_disk_overlay_survives_reopening_and_is_reset_for_another_image() {
        let size = 6 * BLOCK as usize + 10;
        let b = base(size);
        let dir = tempfile::tempdir().unwrap();
        let (mut o, reopened) =
            Overlay::disk(dir.path(), "mac", size as u64, 1 << 20, Some(42)).unwrap();
        assert!(!reopened);
        o.write(&b, &[7; 5000], 100).unwrap();
        o.write_zeroes(&b, 2 * 4096, 4096).unwrap();
        o.flush().unwrap();
        let seen = read_all(&o, &b);
        drop(o);
        let (o, reopened) = Overlay::disk(dir.path(), "mac", size as u64, 1 << 20, None).unwrap();
        assert!(reopened);
        assert_eq!(o.boot(), Some(42));
        assert_eq!(o.used(), 2 * BLOCK);
        assert_eq!(read_all(&o, &b), seen);
        assert_eq!(keys_in(dir.path()), ["mac"]);
        drop(o);
        // A different image size means a different image: start over.
        let (o, reopened) =
            Overlay::disk(dir.path(), "mac", size as u64 + 4096, 1 << 20, None).unwrap();
        assert!(!reopened);
        assert_eq!(o.used(), 0);
        drop(o);
        remove(dir.path(), "mac").unwrap();
        assert!(keys_in(dir.path()).is_empty());
        remove(dir.path(), "mac").unwrap();
    }

    #[test]
    fn a_shared_budget_bounds_all_overlays_together_and_is_given_back() {
        let size = 16 * BLOCK as usize;
        let b = base(size);
        let budget = Budget::new(6 * BLOCK);
        let mut one = Overlay::ram(size as u64, 16 * BLOCK, None).with_budget(budget.clone());
        let mut two = Overlay::ram(size as u64, 16 * BLOCK, None).with_budget(budget.clone());
        one.write(&b, &[1; 4 * 4096], 0).unwrap();
        two.write(&b, &[2; 2 * 4096], 0).unwrap();
        assert_eq!(budget.used(), 6 * BLOCK);
        // Each overlay is far from its own bound; together they are at the total.
        let before = read_all(&two, &b);
        assert!(matches!(
            two.write(&b, &[3], 8 * 4096),
            Err(CowError::TotalFull)
        ));
        assert_eq!(read_all(&two, &b), before);
        // Rewriting held blocks takes nothing more.
        two.write(&b, &[4; 4096], 0).unwrap();
        // Trimmed blocks and dropped overlays give their share back.
        one.trim(0, 4096).unwrap();
        two.write(&b, &[5], 8 * 4096).unwrap();
        drop(one);
        assert_eq!(budget.used(), 3 * BLOCK);
        two.write(&b, &[6; 3 * 4096], 12 * 4096).unwrap();
        assert_eq!(budget.used(), 6 * BLOCK);
    }

    #[test]
    fn random_operations_agree_with_a_plain_copy() {
        let size = 40 * BLOCK as usize + 123;
        let b = base(size);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for (mut o, _dir) in both(size, 30 * BLOCK) {
            let mut model = b.clone();
            for step in 0..400 {
                let off = next(size as u64);
                let len = next((size as u64 - off).min(3 * BLOCK) + 1);
                let (o_, l_) = (off as usize, len as usize);
                match next(4) {
                    0 => {
                        let data = vec![(step % 250) as u8 + 1; l_];
                        match o.write(&b, &data, off) {
                            Ok(()) => model[o_..o_ + l_].copy_from_slice(&data),
                            Err(CowError::NoSpace) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    1 => match o.write_zeroes(&b, off, len) {
                        Ok(()) => model[o_..o_ + l_].fill(0),
                        // Whole blocks may have been zeroed before the edge failed.
                        Err(CowError::NoSpace) => model = read_all(&o, &b),
                        Err(e) => panic!("{e}"),
                    },
                    2 => {
                        o.trim(off, len).unwrap();
                        // Only whole blocks change, to zero: take them from the overlay.
                        let got = read_all(&o, &b);
                        for (i, (m, g)) in model.iter().zip(&got).enumerate() {
                            assert!(m == g || *g == 0, "trim changed byte {i} to {g}");
                        }
                        model = got;
                    }
                    _ => {
                        let mut buf = vec![0; l_];
                        o.read(&b, &mut buf, off).unwrap();
                        assert_eq!(buf, model[o_..o_ + l_], "step {step}");
                    }
                }
                assert!(o.used() <= 30 * BLOCK);
            }
            assert_eq!(read_all(&o, &b), model);
        }
    }
}
