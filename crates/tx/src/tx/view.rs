//! What a transaction function sees: bounds-checked reads and writes
//! (logged or staged per strategy), allocation and free.

use super::{OpEntry, Target, Tx, begin};
use crate::error::{Result, TxError};
use crate::fault::Fault;
use crate::format::{self, Kind};
use crate::options::Strategy;
use ferrite_alloc::{AllocThread, MetaOp, OpKind, PAllocator, Publish};
use ferrite_pmem::POff;
use std::sync::atomic::Ordering;

impl Tx<'_, '_> {
    /// The strategy this transaction runs under.
    pub fn strategy(&self) -> Strategy {
        self.th.strategy
    }

    /// True while recovery re-executes this transaction.
    pub fn is_reexecution(&self) -> bool {
        self.th.st.replay.is_some()
    }

    fn check(&mut self, what: &'static str, off: u64, len: u64) -> Result<()> {
        self.th.st.accesses += 1;
        let limit = self.th.pool.access_limit.load(Ordering::Relaxed);
        if self.th.st.accesses > limit {
            return Err(TxError::Runaway { limit });
        }
        if !self.th.pool.layout.may_touch(off, len) {
            return Err(TxError::OutOfBounds { what, off, len });
        }
        let end = off + len;
        if self.th.st.freed.iter().any(|&(a, b)| off < b && a < end) {
            return Err(TxError::UseAfterFree { off });
        }
        Ok(())
    }

    fn target(&self, off: u64, len: u64) -> Result<Target> {
        let end = off + len;
        for &(a, b) in &self.th.st.fresh {
            if off >= a && end <= b {
                return Ok(Target::Fresh);
            }
            if off < b && a < end {
                return Err(TxError::StraddlesBlock { off, len });
            }
        }
        Ok(Target::Existing)
    }

    /// Reads `dst.len()` bytes at pool offset `at`.
    pub fn read<T: ?Sized>(&mut self, at: POff<T>, dst: &mut [u8]) -> Result<()> {
        let off = at.raw();
        let len = dst.len() as u64;
        if len == 0 {
            return Ok(());
        }
        self.check("read", off, len)?;
        let th = &mut *self.th;
        th.pool.region.read(off as usize, dst);
        let st = &mut th.st;
        match th.strategy {
            // Read your own buffered writes, newest last (`touched` is
            // exactly the buffered bytes under redo).
            Strategy::Redo if !st.redo.is_empty() && st.touched.overlaps(off, off + len) => {
                overlay(&st.redo, &st.redo_buf, off, dst)
            }
            Strategy::Redo => {}
            Strategy::Clobber => {
                if st.staged.overlaps(off, off + len) {
                    overlay(&st.staged.list, &st.staged.buf, off, dst);
                }
                // Bytes of blocks allocated in this transaction are never
                // clobbered inputs (writes to them are not logged), so
                // reading them needs no tracking.
                let fresh = !st.fresh.is_empty()
                    && st.fresh.iter().any(|&(a, b)| off >= a && off + len <= b);
                if !fresh {
                    st.reads.insert(off, off + len);
                }
                if let Some(r) = st.replay.as_mut()
                    && !r.dependent
                    && r.earlier.overlaps(off, off + len)
                {
                    r.dependent = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads one little-endian word.
    pub fn read_u64(&mut self, at: POff<u64>) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(at, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes `src` at pool offset `at`.
    pub fn write<T: ?Sized>(&mut self, at: POff<T>, src: &[u8]) -> Result<()> {
        let off = at.raw();
        let len = src.len() as u64;
        if len == 0 {
            return Ok(());
        }
        self.check("write", off, len)?;
        let end = off + len;
        if let Target::Fresh = self.target(off, len)? {
            let th = &mut *self.th;
            th.pool.region.write(off as usize, src);
            th.st.dirty.insert(off, end);
            return Ok(());
        }
        match self.th.strategy {
            Strategy::NoLog => {}
            Strategy::Undo => self.log_undo(off, end)?,
            Strategy::Redo => {
                let st = &mut self.th.st;
                // Rewriting the range written last (a counter bumped twice,
                // a node rewritten): keep one copy.
                if let Some(&(w, p, n)) = st.redo.last()
                    && w == off
                    && n == src.len()
                {
                    st.redo_buf[p..p + n].copy_from_slice(src);
                    st.touched.insert(off, end);
                    return Ok(());
                }
                let p = st.redo_buf.len();
                st.redo_buf.extend_from_slice(src);
                st.redo.push((off, p, src.len()));
                st.touched.insert(off, end);
                return Ok(());
            }
            Strategy::Clobber => return self.write_clobber(off, end, src),
        }
        let th = &mut *self.th;
        th.pool.region.write(off as usize, src);
        th.st.touched.insert(off, end);
        th.st.dirty.insert(off, end);
        Ok(())
    }

    /// Writes one little-endian word.
    pub fn write_u64(&mut self, at: POff<u64>, v: u64) -> Result<()> {
        self.write(at, &v.to_le_bytes())
    }

    /// Undo: snapshots the not yet written parts of `[off, end)`.
    fn log_undo(&mut self, off: u64, end: u64) -> Result<()> {
        let th = &mut *self.th;
        let st = &mut th.st;
        st.pieces.clear();
        st.touched.gaps(off, end, &mut st.pieces);
        if st.pieces.is_empty() {
            return Ok(());
        }
        begin(&mut st.payload);
        let mut n = 0u32;
        for i in 0..st.pieces.len() {
            let (a, b) = st.pieces[i];
            let len = (b - a) as usize;
            st.old.resize(len, 0);
            th.pool.region.read(a as usize, &mut st.old);
            format::put_bytes(&mut st.payload, a, &st.old);
            let p = st.undo_buf.len();
            st.undo_buf.extend_from_slice(&st.old);
            st.undo.push((a, p, len));
            n += 1;
        }
        th.stats.log_entries += u64::from(n);
        n += th.drain_inverses();
        th.append(Kind::Undo, 0, n)?;
        if th.pool.fault != Fault::UndoNoFence {
            th.fence_point();
        }
        Ok(())
    }

    /// Clobber: a write to existing data. The bytes of `[off, end)` that
    /// the transaction read before writing are clobbered inputs: their old
    /// values join the pending CLOB items and the write is staged until the
    /// next flush point. Any other write is a pure output and goes in
    /// place — once the v_log is durable (the first such write is a flush
    /// point) and unless it overlaps a staged write (then it is staged
    /// after it, to keep program order).
    fn write_clobber(&mut self, off: u64, end: u64, src: &[u8]) -> Result<()> {
        let inputs = self.inputs;
        let func = self.func;
        let th = &mut *self.th;
        let st = &mut th.st;
        let replay = st.replay.is_some();
        st.pieces.clear();
        st.reads.intersect(off, end, &mut st.pieces);
        st.pieces2.clear();
        for i in 0..st.pieces.len() {
            let (a, b) = st.pieces[i];
            st.touched.gaps(a, b, &mut st.pieces2);
        }
        let clobbers = !st.pieces2.is_empty();
        if let Some(r) = st.replay.as_mut() {
            // Same inputs, same clobbered values — unless the function is
            // not deterministic.
            for &(a, b) in &st.pieces2 {
                if r.diverged.is_some() || r.next >= r.expected.len() {
                    break;
                }
                st.old.resize((b - a) as usize, 0);
                th.pool.region.read(a as usize, &mut st.old);
                let (eo, ed) = &r.expected[r.next];
                if *eo == a && ed[..] == st.old[..] {
                    r.next += 1;
                } else {
                    r.diverged = Some(format!(
                        "re-execution clobbers {a:#x} where the crashed run clobbered {eo:#x}"
                    ));
                }
            }
            // A re-execution logs the old value of every byte it writes,
            // pure outputs too, and writes nothing in place before that
            // log is durable: its effects must be undoable as a whole,
            // since no transaction of the recovery group is done before
            // all are (see `recovery`).
            st.pieces2.clear();
            st.touched.gaps(off, end, &mut st.pieces2);
        }
        if th.pool.fault == Fault::ClobberNoInputLog && !replay {
            st.pieces2.clear();
        }
        let logged: usize = st
            .pieces2
            .iter()
            .map(|&(a, b)| format::bytes_item_len((b - a) as usize))
            .sum();
        if logged > 0 {
            th.clobber_room(inputs, logged)?;
        }
        let st = &mut th.st;
        for i in 0..st.pieces2.len() {
            let (a, b) = st.pieces2[i];
            let n = (b - a) as usize;
            let p = format::put_bytes_space(&mut st.pend, a, n);
            // Not yet written by this transaction, so the medium holds the
            // value the transaction started with.
            th.pool.region.read(a as usize, &mut st.pend[p..p + n]);
            st.pend_n += 1;
            th.stats.log_entries += 1;
        }
        let st = &mut th.st;
        if clobbers || replay || st.staged.overlaps(off, end) {
            st.staged.push(off, src);
            st.touched.insert(off, end);
            return Ok(());
        }
        if !st.vlog {
            th.flush_point(inputs, func)?;
        }
        let st = &mut th.st;
        th.pool.region.write(off as usize, src);
        st.touched.insert(off, end);
        st.dirty.insert(off, end);
        Ok(())
    }

    /// Allocates at least `size` bytes; the block's content is whatever it
    /// was (write every byte before reading it). It becomes allocated when
    /// the transaction commits and is given back if it does not.
    pub fn alloc(&mut self, size: usize) -> Result<POff<u8>> {
        let th = &mut *self.th;
        let r = th.heap.reserve(size)?;
        th.st.prep.clear();
        let res = th.heap.prepare(
            &Publish {
                allocs: std::slice::from_ref(&r),
                frees: &[],
                links: &[],
            },
            &mut th.st.prep,
        );
        if let Err(e) = res {
            let _ = th.heap.cancel(r);
            return Err(e.into());
        }
        let start = th.st.ops.len();
        for &fwd in &th.st.prep {
            let inv = inverse(&fwd, &th.pool.region);
            th.st.ops.push(OpEntry {
                fwd,
                inv,
                logged: false,
                live: true,
            });
        }
        let off = r.off();
        let n = r.usable_size() as u64;
        th.st.fresh.push((off.raw(), off.raw() + n));
        th.st.res_ops.push(start..th.st.ops.len());
        th.st.res.push(r);
        Ok(off)
    }

    /// Frees the block at `off` when the transaction commits. Freeing a
    /// block allocated in this transaction gives it back at once.
    pub fn free(&mut self, off: POff<u8>) -> Result<()> {
        let th = &mut *self.th;
        if let Some(i) = th.st.res.iter().position(|r| r.off() == off) {
            let r = th.st.res.swap_remove(i);
            let ops = th.st.res_ops.swap_remove(i);
            for o in &mut th.st.ops[ops] {
                o.live = false;
            }
            // Not added to `freed`: the allocator may hand the block back
            // to this very transaction.
            th.st.fresh.retain(|&(s, _)| s != off.raw());
            th.heap.cancel(r)?;
            return Ok(());
        }
        let size = th.pool.heap.usable_size(off)? as u64;
        if !th.pool.layout.may_touch(off.raw(), size) {
            return Err(TxError::OutOfBounds {
                what: "free",
                off: off.raw(),
                len: size,
            });
        }
        th.st.prep.clear();
        th.heap.prepare(
            &Publish {
                allocs: &[],
                frees: std::slice::from_ref(&off),
                links: &[],
            },
            &mut th.st.prep,
        )?;
        for &fwd in &th.st.prep {
            let inv = inverse(&fwd, &th.pool.region);
            th.st.ops.push(OpEntry {
                fwd,
                inv,
                logged: false,
                live: true,
            });
        }
        th.st.frees.push(off);
        th.st.freed.push((off.raw(), off.raw() + size));
        Ok(())
    }

    /// The application's root pool offset.
    pub fn root(&mut self) -> Result<u64> {
        let at = self.th.pool.layout.root_word;
        self.read_u64(POff::new(at))
    }

    /// Replaces the application's root pool offset.
    pub fn set_root(&mut self, v: u64) -> Result<()> {
        let at = self.th.pool.layout.root_word;
        self.write_u64(POff::new(at), v)
    }

    /// Usable bytes of an allocated block.
    pub fn usable_size(&self, off: POff<u8>) -> Result<usize> {
        if let Some(&(a, b)) = self.th.st.fresh.iter().find(|&&(a, _)| a == off.raw()) {
            return Ok((b - a) as usize);
        }
        Ok(self.th.pool.heap.usable_size(off)?)
    }
}

/// The operation that undoes `op` on a word only this transaction changes:
/// its reservation's bit (set by `Or`), its claimed free's bit (cleared by
/// `AndNot`), an extent header (`Set`, whose old value is read now).
fn inverse(op: &MetaOp, pool: &ferrite_pmem::Region) -> MetaOp {
    match op.kind {
        OpKind::Or => MetaOp::and_not(op.off, op.val),
        OpKind::AndNot => MetaOp::or(op.off, op.val),
        OpKind::Set => MetaOp::set(op.off, pool.load_u64(op.off as usize)),
    }
}

/// Copies into `dst` (the bytes at `off`) every buffered write of `list`
/// that overlaps it, oldest first, so the newest wins.
fn overlay(list: &[(u64, usize, usize)], buf: &[u8], off: u64, dst: &mut [u8]) {
    if list.is_empty() {
        return;
    }
    let end = off + dst.len() as u64;
    for &(w, p, n) in list {
        let we = w + n as u64;
        if w < end && off < we {
            let s = w.max(off);
            let e = we.min(end);
            dst[(s - off) as usize..(e - off) as usize]
                .copy_from_slice(&buf[p + (s - w) as usize..p + (e - w) as usize]);
        }
    }
}
