//! Whole-tree checks of an InP store: [`Inp::scrub_node`] verifies every
//! node and tuple below a node and lists each damaged one, going on past
//! it ([`Engine::scrub`]); [`Inp::walk_node`] checks the tree's shape (key
//! bounds, levels, no node seen twice) for [`Engine::walk`].

use super::*;

/// An error's message without the "corrupt store: " every `Corrupt` has
/// (a scrub lists many: the word says nothing there).
fn bare(e: &EngineError) -> String {
    let s = e.to_string();
    s.strip_prefix("corrupt store: ").unwrap_or(&s).to_string()
}

/// Key bounds and level a subtree must respect (walk).
type Bounds<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<u16>);

impl Inp {
    /// Scrubs the subtree at `n` (keys in `lo..hi`, level `expect_level`
    /// when known): every node and tuple verified, every damaged one
    /// recorded in `out`, going on past it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scrub_node(
        &self,
        n: u64,
        depth: usize,
        (lo, hi, expect_level): Bounds<'_>,
        seen: &mut HashSet<u64>,
        bufs: &mut Bufs,
        out: &mut Scrub,
        pace: &mut dyn FnMut(u64),
    ) {
        let g = &self.geo;
        let span = || {
            let show =
                |k: Option<&[u8]>| k.map_or_else(|| "the end".into(), crate::error::show_key);
            format!("keys from {} to {} unreadable", show(lo), show(hi))
        };
        let node = |detail: String| Damage {
            key: None,
            off: n,
            detail,
            leaf: 0,
            slot: 0,
            span: Some((lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
        };
        if depth > MAX_DEPTH || !seen.insert(n) {
            out.damaged.push(node(format!(
                "node reached twice or too deep (a cycle?); {}",
                span()
            )));
            return;
        }
        let kind = match g.load_media(n, &mut bufs.nb) {
            Ok(k) => k,
            Err(e) => {
                out.damaged.push(node(format!("{}; {}", bare(&e), span())));
                return;
            }
        };
        if let Node::Inner(_) = kind {
            out.bytes += INNER_BYTES as u64;
            pace(out.bytes);
            let d = match InnerD::decode(&bufs.nb[..], n) {
                Ok(d) => d,
                Err(e) => {
                    out.damaged.push(node(format!("{}; {}", bare(&e), span())));
                    return;
                }
            };
            if expect_level.is_some_and(|l| l != d.level)
                || d.seps.windows(2).any(|w| w[0] >= w[1])
                || d.seps
                    .first()
                    .is_some_and(|s| lo.is_some_and(|l| s.as_slice() < l))
                || d.seps
                    .last()
                    .is_some_and(|s| hi.is_some_and(|h| s.as_slice() >= h))
            {
                out.damaged.push(node(format!(
                    "inner node's level or separators inconsistent with its parent; {}",
                    span()
                )));
                return;
            }
            for (i, &c) in d.children.iter().enumerate() {
                let clo = if i == 0 {
                    lo
                } else {
                    Some(d.seps[i - 1].as_slice())
                };
                let chi = if i == d.seps.len() {
                    hi
                } else {
                    Some(d.seps[i].as_slice())
                };
                self.scrub_node(
                    c,
                    depth + 1,
                    (clo, chi, Some(d.level - 1)),
                    seen,
                    bufs,
                    out,
                    pace,
                );
            }
            return;
        }
        out.bytes += LEAF_BYTES as u64;
        if expect_level.is_some_and(|l| l != 0) {
            out.damaged
                .push(node(format!("leaf at an inner level; {}", span())));
            return;
        }
        let leaf: Vec<u8> = bufs.nb[..LEAF_BYTES].to_vec();
        let Ok(bm) = leaf_bitmap(&leaf) else {
            out.damaged.push(node(format!("bad bitmap; {}", span())));
            return;
        };
        self.scrub_tuples(n, &leaf, bm, (lo, hi), seen, bufs, out);
        pace(out.bytes);
    }

    /// Scrubs the tuples of leaf `n` (its bytes `leaf`, its slots in use
    /// `bm`; keys in `lo..hi`): each verified, each damaged one recorded
    /// in `out` by its key when the key's own check vouches for it, else
    /// by the leaf's key range.
    #[allow(clippy::too_many_arguments)]
    fn scrub_tuples(
        &self,
        n: u64,
        leaf: &[u8],
        mut bm: u64,
        (lo, hi): (Option<&[u8]>, Option<&[u8]>),
        seen: &mut HashSet<u64>,
        bufs: &mut Bufs,
        out: &mut Scrub,
    ) {
        let g = &self.geo;
        while bm != 0 {
            let i = bm.trailing_zeros() as usize;
            bm &= bm - 1;
            let (p, t) = slot(leaf, i);
            let stored_key =
                |bufs: &mut Bufs| g.tuple_key(t, &mut bufs.kbuf).ok().map(<[u8]>::to_vec);
            // A tuple whose key cannot be trusted is known by its leaf:
            // it stands for the keys of that leaf's range.
            let tuple = |key: Option<Vec<u8>>, detail: String| Damage {
                span: key
                    .is_none()
                    .then(|| (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec))),
                key,
                off: t,
                detail,
                leaf: n,
                slot: i as u32,
            };
            if !seen.insert(t) {
                out.damaged.push(tuple(
                    None,
                    format!("tuple referenced twice (slot {i} of leaf {n:#x})"),
                ));
                continue;
            }
            match g.tuple_read(t, &mut bufs.kbuf, &mut bufs.val) {
                Ok(kl) => {
                    let k = &bufs.kbuf[..kl];
                    out.bytes += (TUPLE_HDR + kl + bufs.val.len()) as u64;
                    if !tree::slot_matches(leaf, i, k)
                        || lo.is_some_and(|l| k < l)
                        || hi.is_some_and(|h| k >= h)
                    {
                        let k = k.to_vec();
                        out.damaged.push(tuple(
                            Some(k),
                            "tuple's key does not belong where its leaf links it".into(),
                        ));
                    } else {
                        out.records += 1;
                    }
                }
                Err(e) => {
                    // Name the key only when its own check says it is
                    // the key that was stored.
                    let key = stored_key(bufs).filter(|k| g.tuple_key_ok(t, k));
                    let mut detail = match e {
                        EngineError::DamagedValue { detail, .. } => detail,
                        e => e.to_string(),
                    };
                    if key.is_none() {
                        detail.push_str(&format!(
                            "; its key is damaged too (slot {i} of leaf {n:#x}, key prefix {:#018x}): one of the keys from {} to {}",
                            p,
                            lo.map_or_else(|| "the start".into(), crate::error::show_key),
                            hi.map_or_else(|| "the end".into(), crate::error::show_key),
                        ));
                    }
                    out.damaged.push(tuple(key, detail));
                }
            }
        }
    }

    /// Walks the subtree at `n`; its keys must lie in `lo..hi` and its
    /// level be `expect_level` (when known).
    pub(super) fn walk_node(
        &self,
        n: u64,
        depth: usize,
        (lo, hi, expect_level): Bounds<'_>,
        out: &mut Walk,
        seen: &mut HashSet<u64>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(corrupt("tree deeper than 32 levels"));
        }
        if !seen.insert(n) {
            return Err(corrupt(format!("node {n:#x} reached twice")));
        }
        let g = &self.geo;
        let mut b = tree::node_buf();
        if g.load_media(n, &mut b)? == Node::Leaf {
            if expect_level.is_some_and(|l| l != 0) {
                return Err(corrupt(format!("leaf {n:#x} at an inner level")));
            }
            out.blocks.push((n, LEAF_BYTES as u64));
            let ents = leaf_sorted(g, &b[..LEAF_BYTES])?;
            let mut bm = leaf_bitmap(&b[..])?;
            while bm != 0 {
                let i = bm.trailing_zeros() as usize;
                bm &= bm - 1;
                let (_, t) = slot(&b[..], i);
                let mut kb = [0u8; MAX_KEY];
                if !tree::slot_matches(&b[..], i, g.tuple_key(t, &mut kb)?) {
                    return Err(corrupt(format!(
                        "leaf {n:#x} slot {i}: its prefix or fingerprint is not its key's"
                    )));
                }
            }
            for (k, t) in ents {
                if lo.is_some_and(|l| k.as_slice() < l) || hi.is_some_and(|h| k.as_slice() >= h) {
                    return Err(corrupt(format!("leaf {n:#x}: key outside its separators")));
                }
                if out.entries.last().is_some_and(|(pk, _)| *pk >= k) {
                    return Err(corrupt(format!("leaf {n:#x}: keys out of order")));
                }
                if !seen.insert(t) {
                    return Err(corrupt(format!("tuple {t:#x} referenced twice")));
                }
                let (kl, vl, _) = g.tuple_hdr(t)?;
                let mut v = Vec::new();
                let mut kb = [0u8; MAX_KEY];
                g.tuple_read(t, &mut kb, &mut v)?;
                out.blocks.push((t, (TUPLE_HDR + kl + vl) as u64));
                out.entries.push((k, v));
            }
            return Ok(());
        }
        let d = InnerD::decode(&b[..], n)?;
        if expect_level.is_some_and(|l| l != d.level) {
            return Err(corrupt(format!("inner {n:#x}: wrong level")));
        }
        out.blocks.push((n, INNER_BYTES as u64));
        for w in d.seps.windows(2) {
            if w[0] >= w[1] {
                return Err(corrupt(format!("inner {n:#x}: separators out of order")));
            }
        }
        for (i, &c) in d.children.iter().enumerate() {
            let clo = if i == 0 {
                lo
            } else {
                Some(d.seps[i - 1].as_slice())
            };
            let chi = if i == d.seps.len() {
                hi
            } else {
                Some(d.seps[i].as_slice())
            };
            self.walk_node(c, depth + 1, (clo, chi, Some(d.level - 1)), out, seen)?;
        }
        Ok(())
    }
}
