//! Inserts: [`INSERT`](super::INSERT)'s body, leaf and internal-node
//! splits up to a new root.

use super::*;

pub(super) fn tx_insert(tx: &mut Tx<'_, '_>, inp: &Inputs<'_>) -> Result<u64> {
    let (hdr, key) = (inp.arg_u64(0), inp.arg_u64(1));
    let value = inp.buf(0);
    let k = key32(key);
    let mut hb = [0u8; 48];
    tx.read(p64(hdr), &mut hb)?;
    let (f, root, height) = header_fields(hdr, &hb)?;
    with_scratch(f, |kb, pb| {
        insert_in(tx, hdr, f, (root, height), &k, value, kb, pb)
    })
}

/// The body of [`tx_insert`] once the header is read: `kb` and `pb` are
/// scratch for F+1 keys and pointers.
#[allow(clippy::too_many_arguments)]
fn insert_in(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    k: &[u8; KEY],
    value: &[u8],
    kb: &mut [[u8; KEY]],
    pb: &mut [u8],
) -> Result<u64> {
    let mut path = Path::new();
    let leaf = descend(tx, f, (root, height), k, &mut path, kb)?;
    let (n, pos) = match leaf.at {
        Ok(i) => {
            let vb = tx.read_u64(p64(ptr_off(leaf.off, f, i)))?;
            tx.write(POff::<u8>::new(vb), &value_block(key_of(k), value))?;
            return Ok(0);
        }
        Err(i) => (leaf.n, i),
    };
    if (n as u64) < f {
        // Room in the leaf: shift the tail right by one entry. The keys
        // are in hand from the descent; only the tail's pointers are
        // read, and the bytes written (keys and pointers from `pos` to
        // the new end, then `n`) are those of a whole-node store.
        // Everything is read before the first write (a clobber
        // transaction must not fail after it).
        // `n + 1 ≤ F` entries: the scratch holds them.
        let pb = &mut pb[..8 * (n - pos + 1)];
        tx.read(p64(ptr_off(leaf.off, f, pos)), &mut pb[8..])?;
        let vb = tx.alloc(value.len() + 8)?;
        tx.write(vb, &value_block(key_of(k), value))?;
        kb.copy_within(pos..n, pos + 1);
        kb[pos] = *k;
        pb[..8].copy_from_slice(&vb.raw().to_le_bytes());
        tx.write(p64(key_off(leaf.off, pos)), kb[pos..=n].as_flattened())?;
        tx.write(p64(ptr_off(leaf.off, f, pos)), pb)?;
        tx.write_u64(p64(leaf.off + N_N), n as u64 + 1)?;
        return Ok(1);
    }
    // The leaf splits, and so does every full ancestor above it; the
    // first ancestor with room takes the last separator. Only those
    // nodes are read whole (the leaf's keys are in hand).
    let steps = path.steps();
    let full = steps
        .iter()
        .rev()
        .take_while(|s| u64::from(s.n) == f)
        .count();
    let grows = full == steps.len();
    let top = steps.len() - full - usize::from(!grows);
    let mut edit = path.load_from(tx, f, top)?;
    let mut keys = Vec::with_capacity(n + 1);
    keys.extend_from_slice(&kb[..n]);
    let mut leaf_nd = load_ptrs(tx, leaf.off, f, n, keys, true)?;
    // Allocate everything first: the value, a node per split, a new root
    // if the split reaches it (a clobber transaction must not fail after
    // its first write).
    let splits = full + 1;
    let vb = tx.alloc(value.len() + 8)?;
    let mut fresh = [0u64; MAX_HEIGHT + 1];
    let nfresh = splits + usize::from(grows);
    for slot in &mut fresh[..nfresh] {
        *slot = tx.alloc(node_bytes(f) as usize)?.raw();
    }
    // Handed out last-allocated first, as a stack: the same blocks go to
    // the same nodes as when the path was a `Vec` of `pop`s.
    let mut fresh = fresh[..nfresh].iter().rev().copied();
    tx.write(vb, &value_block(key_of(k), value))?;
    split_up(
        tx,
        hdr,
        f,
        (root, height),
        &mut edit,
        &mut leaf_nd,
        pos,
        (*k, vb.raw()),
        &mut fresh,
    )
}

/// Inserts `(k, v)` at `pos` of the full leaf `leaf`, splitting it and
/// the full ancestors in `path` (whole images, bottom last; the first
/// holds the node that takes the last separator unless the root splits),
/// writing each split-off node to a block of `fresh`.
#[allow(clippy::too_many_arguments)]
fn split_up(
    tx: &mut Tx<'_, '_>,
    hdr: u64,
    f: u64,
    (root, height): (u64, u64),
    path: &mut Vec<(Node, usize)>,
    leaf: &mut Node,
    pos: usize,
    (k, v): ([u8; KEY], u64),
    fresh: &mut impl Iterator<Item = u64>,
) -> Result<u64> {
    let corrupt = || TxError::Corrupt("B+tree split ran out of blocks".into());
    leaf.keys.insert(pos, k);
    leaf.ptrs.insert(pos, v);
    leaf.n += 1;
    // Split the leaf: the left half stays, the right half moves to a new
    // leaf linked after it; its first key goes up.
    let mid = leaf.n / 2;
    let right = Node {
        off: fresh.next().ok_or_else(corrupt)?,
        n: leaf.n - mid,
        keys: leaf.keys.split_off(mid),
        ptrs: leaf.ptrs.split_off(mid),
    };
    leaf.n = mid;
    let next = tx.read_u64(p64(leaf.off + N_NEXT))?;
    write_new(tx, f, &right, true, next)?;
    tx.write_u64(p64(leaf.off + N_NEXT), right.off)?;
    store(tx, f, leaf, pos.min(mid), pos.min(mid))?;
    let mut sep = right.keys[0];
    let mut child = right.off;
    // Insert (sep, child) into the ancestors, splitting full ones.
    while let Some((mut nd, i)) = path.pop() {
        nd.keys.insert(i, sep);
        nd.ptrs.insert(i + 1, child);
        nd.n += 1;
        if nd.n as u64 <= f {
            return store(tx, f, &nd, i, i + 1).map(|()| 1);
        }
        // Internal split: the middle key goes up, not into either half.
        let mid = nd.n / 2;
        let mut rk = nd.keys.split_off(mid);
        let up = rk.remove(0);
        let rp = nd.ptrs.split_off(mid + 1);
        let r = Node {
            off: fresh.next().ok_or_else(corrupt)?,
            n: rk.len(),
            keys: rk,
            ptrs: rp,
        };
        nd.n = mid;
        write_new(tx, f, &r, false, 0)?;
        store(tx, f, &nd, i.min(mid), (i + 1).min(mid + 1))?;
        sep = up;
        child = r.off;
    }
    // The root split: a new root above the two halves.
    let nr = Node {
        off: fresh.next().ok_or_else(corrupt)?,
        n: 1,
        keys: vec![sep],
        ptrs: vec![root, child],
    };
    write_new(tx, f, &nr, false, 0)?;
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&nr.off.to_le_bytes());
    b[8..16].copy_from_slice(&(height + 1).to_le_bytes());
    tx.write(p64(hdr + H_ROOT), &b)?;
    Ok(1)
}

/// Writes a whole new node (a block allocated in this transaction),
/// staged in a stack image sized for the fanout's class (as [`with_scratch`]).
fn write_new(tx: &mut Tx<'_, '_>, f: u64, nd: &Node, leaf: bool, next: u64) -> Result<()> {
    fn run<const B: usize>(
        tx: &mut Tx<'_, '_>,
        f: u64,
        nd: &Node,
        leaf: bool,
        next: u64,
    ) -> Result<()> {
        let mut b = [0u8; B];
        let b = &mut b[..node_bytes(f) as usize];
        b[0..8].copy_from_slice(&u64::from(leaf).to_le_bytes());
        b[8..16].copy_from_slice(&(nd.n as u64).to_le_bytes());
        b[16..24].copy_from_slice(&next.to_le_bytes());
        let po = ptrs_off(f) as usize;
        let (kpart, ppart) = b[N_KEYS as usize..].split_at_mut(po - N_KEYS as usize);
        for (d, k) in kpart.chunks_exact_mut(KEY).zip(&nd.keys) {
            d.copy_from_slice(k);
        }
        for (d, p) in ppart.chunks_exact_mut(8).zip(&nd.ptrs) {
            d.copy_from_slice(&p.to_le_bytes());
        }
        tx.write(p64(nd.off), b)
    }
    if f <= SMALL_FANOUT {
        run::<{ node_bytes(SMALL_FANOUT) as usize }>(tx, f, nd, leaf, next)
    } else {
        run::<{ node_bytes(MAX_FANOUT) as usize }>(tx, f, nd, leaf, next)
    }
}
