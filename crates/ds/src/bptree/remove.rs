//! Removes: [`REMOVE`](super::REMOVE)'s body, planned in DRAM (merges,
//! borrows from a sibling, the root collapsing) then written.

use super::*;

/// Fewest keys a node other than the root holds: `⌊F/2⌋` (a root leaf
/// holds 0..=F keys, a root internal node 1..=F).
///
/// Why this bound: a split never leaves fewer — a leaf of F+1 keys splits
/// into `⌊(F+1)/2⌋` and `⌈(F+1)/2⌉`, an internal node of F+1 keys into
/// `⌊(F+1)/2⌋` and `F−⌊(F+1)/2⌋ = ⌊F/2⌋` around the key that goes up —
/// and a merge always fits: a node one below the minimum and a sibling
/// at it hold `2⌊F/2⌋−1 ≤ F` keys (leaves) or, with the separator pulled
/// down, `2⌊F/2⌋ ≤ F` (internal nodes).
pub fn min_keys(f: u64) -> usize {
    (f / 2) as usize
}

/// Result word of [`REMOVE`]: bit 0 the key was there; bits 8..16 the
/// merges it did; then one bit each for a borrow from the left sibling,
/// from the right one, and the root collapsing (the tree lost a level).
/// Only the caller reads it (recovery ignores results).
pub(super) const R_REMOVED: u64 = 1;
pub(super) const R_MERGE_SHIFT: u32 = 8;
pub(super) const R_BORROW_LEFT: u64 = 1 << 16;
pub(super) const R_BORROW_RIGHT: u64 = 1 << 17;
pub(super) const R_COLLAPSE: u64 = 1 << 18;

/// Writes the parts of `after` that differ from `before` (the same node
/// as loaded): keys and pointers from the first changed index, `n` if it
/// changed. Bytes past `n` are dead, so a shrinking node writes nothing
/// past its new end. Logging only what changed keeps undo/redo entries
/// and clobber inputs small.
fn store_changed(tx: &mut Tx<'_, '_>, f: u64, before: &Node, after: &Node) -> Result<()> {
    let first = |a: &[[u8; KEY]], b: &[[u8; KEY]]| {
        (0..b.len())
            .find(|&i| a.get(i) != Some(&b[i]))
            .unwrap_or(b.len())
    };
    let kf = first(&before.keys, &after.keys);
    let pf = (0..after.ptrs.len())
        .find(|&i| before.ptrs.get(i) != Some(&after.ptrs[i]))
        .unwrap_or(after.ptrs.len());
    write_entries(tx, f, after.off, &after.keys, kf, &after.ptrs, pf)?;
    if before.n != after.n {
        tx.write_u64(p64(after.off + N_N), after.n as u64)?;
    }
    Ok(())
}

/// Everything a removal will change, computed from reads alone before
/// anything is written (a clobber transaction must not fail after its
/// first write): nodes as loaded and as they become, leaf `next` links,
/// blocks to free, and a new (root, height).
#[derive(Default)]
struct Plan {
    nodes: Vec<(Node, Node)>,
    links: Vec<(u64, u64)>,
    frees: Vec<u64>,
    header: Option<(u64, u64)>,
    result: u64,
}

/// Removes `key`; rebalances bottom-up while a node other than the root
/// falls below [`min_keys`]. At each level the underfull node borrows one
/// entry from its left sibling (same parent) if that has more than the
/// minimum, else from its right sibling, else merges with the left
/// sibling (or the right one when it is the leftmost child): the right
/// node of the pair is emptied into the left, freed, and its separator
/// leaves the parent, which may underflow in turn. A root left with no
/// key and one child is freed and that child becomes the root (height
/// decreases). Leaves merge right-into-left, so the only `next` link to
/// fix is the surviving left leaf's. Every node touched is the path node,
/// its parent, or a sibling adjacent to it: the caller's locks
/// ([`BpTree::remove`]) cover exactly those.
pub(super) fn tx_remove(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let k = key32(key);
    let mut hb = [0u8; 48];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = header_fields(hdr, &hb)?;
    with_scratch(f, |kb, pb| {
        remove_in(tx, hdr, f, (root, height), &k, kb, pb)
    })
}

/// The body of [`tx_remove`] once the header is read: `kb` and `pb` are
/// scratch for F+1 keys and pointers.
fn remove_in(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    k: &[u8; KEY],
    kb: &mut [[u8; KEY]],
    pb: &mut [u8],
) -> Result<u64> {
    let mut path = Path::new();
    let at = descend(tx, f, (root, height), k, &mut path, kb)?;
    let Ok(pos) = at.at else {
        return Ok(0);
    };
    if path.len == 0 || at.n > min_keys(f) {
        // The leaf keeps at least the minimum (or is the root): only it
        // changes. Shift the tail left over `pos`, writing what
        // `store_changed` would for the whole node (keys and pointers
        // from `pos` to the new end, then `n`). The keys are in hand
        // from the descent; everything else is read, and the value block
        // freed, before the first write.
        // `n ≤ F` pointers: the scratch holds them.
        let pb = &mut pb[..8 * (at.n - pos)];
        tx.read(p64(ptr_off(at.off, f, pos)), pb)?;
        tx.free(POff::new(le(pb, 0)))?;
        tx.write(p64(key_off(at.off, pos)), kb[pos + 1..at.n].as_flattened())?;
        tx.write(p64(ptr_off(at.off, f, pos)), &pb[8..])?;
        tx.write_u64(p64(at.off + N_N), at.n as u64 - 1)?;
        return Ok(R_REMOVED);
    }
    // The leaf underflows: rebalancing reads the path's nodes whole.
    let path = path.load_from(tx, f, 0)?;
    let mut keys = Vec::with_capacity(at.n + 1);
    keys.extend_from_slice(&kb[..at.n]);
    let leaf = load_ptrs(tx, at.off, f, at.n, keys, true)?;
    let plan = plan_remove(tx, f, height, path, leaf, pos)?;
    // Frees first: they only record what commit will do, and may fail
    // (a corrupt pointer) while nothing has been written yet.
    for &b in &plan.frees {
        tx.free(POff::new(b))?;
    }
    for (before, after) in &plan.nodes {
        store_changed(tx, f, before, after)?;
    }
    for &(l, next) in &plan.links {
        tx.write_u64(p64(l + N_NEXT), next)?;
    }
    if let Some((r, h)) = plan.header {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&r.to_le_bytes());
        b[8..16].copy_from_slice(&h.to_le_bytes());
        tx.write(p64(hdr + H_ROOT), &b)?;
    }
    Ok(plan.result)
}

/// The reads and decisions of [`tx_remove`] (see there).
fn plan_remove(
    tx: &mut Tx<'_, '_>,
    f: u64,
    height: u64,
    mut path: Vec<(Node, usize)>,
    leaf: Node,
    pos: usize,
) -> Result<Plan> {
    let min = min_keys(f);
    let mut plan = Plan {
        frees: vec![leaf.ptrs[pos]],
        result: R_REMOVED,
        ..Plan::default()
    };
    let mut cur = leaf.clone();
    cur.keys.remove(pos);
    cur.ptrs.remove(pos);
    cur.n -= 1;
    let mut cur0 = leaf;
    let mut is_leaf = true;
    let mut merges = 0u64;
    let corrupt = |what: &str, off: u64| TxError::Corrupt(format!("B+tree node {off:#x}: {what}"));
    while let Some((par0, i)) = path.pop() {
        if cur.n >= min {
            plan.result |= merges << R_MERGE_SHIFT;
            plan.nodes.push((cur0, cur));
            return Ok(plan);
        }
        let mut par = par0.clone();
        let left = match i {
            0 => None,
            _ => Some(load(tx, par0.ptrs[i - 1], f, is_leaf)?),
        };
        if let Some(l0) = left.as_ref().filter(|l| l.n > min) {
            // Borrow the left sibling's last entry. A leaf's new first key
            // becomes the separator; an internal node rotates through the
            // parent (the separator comes down, the sibling's last key goes up).
            let mut l = l0.clone();
            let (lk, lp) = (l.keys.pop(), l.ptrs.pop());
            let (Some(lk), Some(lp)) = (lk, lp) else {
                return Err(corrupt("empty sibling", l.off));
            };
            l.n -= 1;
            if is_leaf {
                cur.keys.insert(0, lk);
                par.keys[i - 1] = lk;
            } else {
                cur.keys.insert(0, par.keys[i - 1]);
                par.keys[i - 1] = lk;
            }
            cur.ptrs.insert(0, lp);
            cur.n += 1;
            plan.nodes
                .extend([(l0.clone(), l), (cur0, cur), (par0, par)]);
            plan.result |= R_BORROW_LEFT | merges << R_MERGE_SHIFT;
            return Ok(plan);
        }
        let right = if i < par0.n {
            Some(load(tx, par0.ptrs[i + 1], f, is_leaf)?)
        } else {
            None
        };
        if let Some(r0) = right.as_ref().filter(|r| r.n > min) {
            // Borrow the right sibling's first entry (mirror image).
            let mut r = r0.clone();
            let (rk, rp) = (r.keys.remove(0), r.ptrs.remove(0));
            r.n -= 1;
            if is_leaf {
                cur.keys.push(rk);
                par.keys[i] = r.keys[0];
            } else {
                cur.keys.push(par.keys[i]);
                par.keys[i] = rk;
            }
            cur.ptrs.push(rp);
            cur.n += 1;
            plan.nodes
                .extend([(cur0, cur), (r0.clone(), r), (par0, par)]);
            plan.result |= R_BORROW_RIGHT | merges << R_MERGE_SHIFT;
            return Ok(plan);
        }
        // Merge: both candidates are at or below the minimum, so the pair
        // fits in one node. `s` is the separator between them.
        let (l0, mut l, r, s) = match (left, right) {
            (Some(l), _) => (l.clone(), l, cur, i - 1),
            (None, Some(r)) => (cur0, cur, r, i),
            (None, None) => return Err(corrupt("internal node without keys", par0.off)),
        };
        if l.off == r.off || r.off == par0.off {
            return Err(corrupt("child listed twice", r.off));
        }
        if is_leaf {
            let next = tx.read_u64(p64(r.off + N_NEXT))?;
            plan.links.push((l.off, next));
        } else {
            l.keys.push(par.keys[s]);
        }
        l.keys.extend_from_slice(&r.keys);
        l.ptrs.extend_from_slice(&r.ptrs);
        l.n = l.keys.len();
        if l.n as u64 > f {
            return Err(corrupt("siblings too full to merge", l.off));
        }
        par.keys.remove(s);
        par.ptrs.remove(s + 1);
        par.n -= 1;
        plan.frees.push(r.off);
        plan.nodes.push((l0, l));
        merges += 1;
        cur0 = par0;
        cur = par;
        is_leaf = false;
    }
    // `cur` is the root.
    plan.result |= merges << R_MERGE_SHIFT;
    if !is_leaf && cur.n == 0 {
        // One child left: it becomes the root, one level up.
        plan.header = Some((cur.ptrs[0], height - 1));
        plan.frees.push(cur.off);
        plan.result |= R_COLLAPSE;
    } else {
        plan.nodes.push((cur0, cur));
    }
    Ok(plan)
}
