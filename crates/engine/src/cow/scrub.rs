//! Whole-tree checks of a CoW store: [`scrub_node`] verifies every node
//! and value below a node and lists each damaged one, going on past it
//! ([`Engine::scrub`]); [`walk_tree`] checks the tree's shape and counts
//! what it reaches ([`Engine::walk`], and the blocks recovery keeps).

use super::*;

/// What a full walk found.
pub(super) struct Found {
    pub(super) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) blocks: Vec<(u64, u64)>,
    pub(super) keys: u64,
}

/// Walks and verifies the whole tree at `root`: checksums, levels, key
/// order and bounds, each block referenced once. With `values`, collects
/// the contents too.
/// Scrubs the subtree of the node at `off` (checksum `crc` as its parent
/// recorded, level `level` when known) holding keys `lo..hi`: every node
/// and blob verified, every damaged one recorded, going on past it.
pub(super) fn scrub_node(
    pool: &Region,
    nonce: u64,
    (off, crc, level): (u64, u32, Option<u8>),
    (lo, hi): (Option<&[u8]>, Option<&[u8]>),
    seen: &mut HashSet<u64>,
    out: &mut Scrub,
    pace: &mut dyn FnMut(u64),
) {
    let node = |detail: String| Damage {
        key: None,
        off,
        detail: format!(
            "cow: node {off:#x}: {detail}; keys from {} to {} unreadable",
            lo.map_or_else(|| "the start".into(), crate::error::show_key),
            hi.map_or_else(|| "the end".into(), crate::error::show_key),
        ),
        leaf: 0,
        slot: 0,
        span: Some((lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
    };
    if !seen.insert(off) {
        out.damaged.push(node("referenced twice".into()));
        return;
    }
    let mut buf = Vec::new();
    let h = match tree::read_node(pool, off, &mut buf)
        .and_then(|h| format::check_node_crc(&buf, nonce, crc).map(|_| h))
    {
        Ok(h) => h,
        Err(e) => {
            let e = e.to_string();
            out.damaged.push(node(
                e.strip_prefix("corrupt store: ").unwrap_or(&e).to_string(),
            ));
            return;
        }
    };
    if level.is_some_and(|l| l != h.level) {
        out.damaged
            .push(node(format!("level {} where {level:?} expected", h.level)));
        return;
    }
    out.bytes += h.len as u64;
    let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
    let ents: std::result::Result<Vec<Ent<'_>>, _> = format::Entries::new(&h, &buf).collect();
    let ents = match ents {
        Ok(e) => e,
        Err(e) => {
            out.damaged.push(node(e.to_string()));
            return;
        }
    };
    if h.kind == KIND_LEAF {
        for e in ents {
            let Ent::Leaf(k, v) = e else {
                out.damaged.push(node("branch entry in a leaf".into()));
                return;
            };
            if !in_bounds(k) {
                out.damaged
                    .push(node("key outside its parent's range".into()));
                return;
            }
            if let ValRef::Blob { off: b, len, crc } = v {
                let mut x = Vec::new();
                let r = match tree::read_blob(pool, b, len as usize, &mut x) {
                    Err(e) => Err(e.to_string()),
                    Ok(()) => {
                        let c = format::crc(nonce, &x);
                        if c == crc {
                            Ok(())
                        } else {
                            Err(format!(
                                "cow: value blob {b:#x}+{len} fails its checksum (computed {c:#010x}, the leaf recorded {crc:#010x})"
                            ))
                        }
                    }
                };
                out.bytes += u64::from(len);
                if let Err(detail) = r {
                    out.damaged.push(Damage {
                        key: Some(k.to_vec()),
                        off: b,
                        detail,
                        leaf: off,
                        slot: 0,
                        span: None,
                    });
                    continue;
                }
            }
            out.records += 1;
        }
        pace(out.bytes);
        return;
    }
    let mut kids: Vec<(&[u8], u64, u32)> = Vec::with_capacity(ents.len());
    for e in ents {
        let Ent::Branch(k, c, ccrc) = e else {
            out.damaged.push(node("leaf entry in a branch".into()));
            return;
        };
        kids.push((k, c, ccrc));
    }
    pace(out.bytes);
    for i in 0..kids.len() {
        let clo = if i == 0 { lo } else { Some(kids[i].0) };
        let chi = kids.get(i + 1).map(|k| k.0).or(hi);
        let (_, c, ccrc) = kids[i];
        let lvl = h.level.checked_sub(1);
        scrub_node(pool, nonce, (c, ccrc, lvl), (clo, chi), seen, out, pace);
    }
}

pub(super) fn walk_tree(
    pool: &Region,
    nonce: u64,
    root: u64,
    crc: u32,
    values: bool,
) -> Result<Found> {
    let mut f = Found {
        entries: Vec::new(),
        blocks: Vec::new(),
        keys: 0,
    };
    if root == 0 {
        return Ok(f);
    }
    let mut seen = HashSet::new();
    let mut buf = Vec::new();
    let first = tree::read_node(pool, root, &mut buf)?;
    walk_node(
        pool,
        nonce,
        root,
        crc,
        first.level,
        None,
        None,
        values,
        &mut seen,
        &mut f,
    )?;
    Ok(f)
}

#[allow(clippy::too_many_arguments)]
fn walk_node(
    pool: &Region,
    nonce: u64,
    off: u64,
    crc: u32,
    level: u8,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    values: bool,
    seen: &mut HashSet<u64>,
    f: &mut Found,
) -> Result<()> {
    let corrupt = |what: String| EngineError::Corrupt(format!("cow: node {off:#x}: {what}"));
    if !seen.insert(off) {
        return Err(corrupt("referenced twice".into()));
    }
    let mut buf = Vec::new();
    let h = tree::read_node(pool, off, &mut buf)?;
    format::check_node_crc(&buf, nonce, crc)?;
    if h.level != level {
        return Err(corrupt(format!("level {} where {level} expected", h.level)));
    }
    f.blocks.push((off, h.len as u64));
    let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
    let mut it = format::Entries::new(&h, &buf);
    if h.kind == KIND_LEAF {
        let mut prev: Option<&[u8]> = None;
        for e in it.by_ref() {
            let Ent::Leaf(k, v) = e? else {
                return Err(corrupt("branch entry in a leaf".into()));
            };
            if prev.is_some_and(|p| p >= k) || !in_bounds(k) {
                return Err(corrupt("keys out of order".into()));
            }
            prev = Some(k);
            f.keys += 1;
            let value = match v {
                ValRef::Inline(x) => values.then(|| x.to_vec()),
                ValRef::Blob { off: b, len, crc } => {
                    if !seen.insert(b) {
                        return Err(corrupt(format!("blob {b:#x} referenced twice")));
                    }
                    f.blocks.push((b, len as u64));
                    let mut x = Vec::new();
                    tree::read_blob(pool, b, len as usize, &mut x)?;
                    let computed = format::crc(nonce, &x);
                    if computed != crc {
                        return Err(corrupt(format!(
                            "blob {b:#x} checksum {computed:#010x}, the leaf recorded {crc:#010x}"
                        )));
                    }
                    values.then_some(x)
                }
            };
            if let Some(x) = value {
                f.entries.push((k.to_vec(), x));
            }
        }
    } else {
        let mut kids: Vec<(&[u8], u64, u32)> = Vec::with_capacity(h.count as usize);
        for e in it.by_ref() {
            let Ent::Branch(k, c, ccrc) = e? else {
                return Err(corrupt("leaf entry in a branch".into()));
            };
            if let Some(&(p, ..)) = kids.last()
                && (p >= k || !in_bounds(k))
            {
                return Err(corrupt("keys out of order".into()));
            }
            kids.push((k, c, ccrc));
        }
        for i in 0..kids.len() {
            let clo = if i == 0 { lo } else { Some(kids[i].0) };
            let chi = kids.get(i + 1).map(|k| k.0).or(hi);
            let (_, c, ccrc) = kids[i];
            walk_node(pool, nonce, c, ccrc, level - 1, clo, chi, values, seen, f)?;
        }
    }
    if !it.exhausted() {
        return Err(corrupt("length disagrees with the entries".into()));
    }
    Ok(())
}
