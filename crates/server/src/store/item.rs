//! Item format 2 (module docs of [`super`]): encoding, decoding, the
//! CRC32C per item, and the checks of a whole map's items.

use super::{
    CRC_AT, FORMAT, HEADER, Kv, META_CAS, META_FLUSH, META_FORMAT, Result, STATE_STALE,
    STATE_TOKEN_SENT, StoreError, TIME_MAX, client_key_shown,
};
use crate::protocol::Expiry;

/// A decoded item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Opaque client flags.
    pub flags: u32,
    /// Absolute unix seconds; 0 = never.
    pub exptime: u64,
    /// The item's CAS: unique across restarts ([`super::CAS_BATCH`]).
    pub cas: u64,
    /// Unix seconds of the last write (at most 2^56 - 1).
    pub time: u64,
    /// Marked stale (`md I`, `ms I` with an older CAS): meta `X`.
    pub stale: bool,
    /// A client has been sent the win (`W`) for recaching this item; later
    /// fetches see `Z` until the item is replaced or invalidated again.
    pub token_sent: bool,
    /// The value's bytes.
    pub data: Vec<u8>,
}

impl Item {
    /// The on-map bytes of this item under map key `map_key` (`k` ++
    /// client key), its checksum included (see the module docs).
    pub fn encode(&self, map_key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(HEADER + self.data.len());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.exptime.to_le_bytes());
        out.extend_from_slice(&self.cas.to_le_bytes());
        out.extend_from_slice(&self.time.min(TIME_MAX).to_le_bytes()[..7]);
        let mut state = 0;
        if self.stale {
            state |= STATE_STALE;
        }
        if self.token_sent {
            state |= STATE_TOKEN_SENT;
        }
        out.push(state);
        let crc = item_crc(map_key, &out[..CRC_AT], &self.data);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.data);
    }

    /// The item stored as `b` under map key `map_key`, verified.
    pub fn decode(map_key: &[u8], b: &[u8]) -> Result<Item> {
        let mut it = Item::decode_header(map_key, b)?;
        it.data = b[HEADER..].to_vec();
        Ok(it)
    }

    /// [`Item::decode`] without the data (left empty): for a reader that
    /// uses the data where it lies, `&b[HEADER..]`. The checksum still
    /// covers the data: it is verified here.
    pub fn decode_header(map_key: &[u8], b: &[u8]) -> Result<Item> {
        let it = Item::decode_header_unverified(map_key, b)?;
        let stored = u32::from_le_bytes([b[CRC_AT], b[CRC_AT + 1], b[CRC_AT + 2], b[CRC_AT + 3]]);
        if item_crc(map_key, &b[..CRC_AT], &b[HEADER..]) != stored {
            return Err(StoreError::damaged(map_key, "checksum mismatch"));
        }
        Ok(it)
    }

    /// [`Item::decode_header`] without the checksum (the measurement of its
    /// cost, [`Shared::set_verify`](super::Shared::set_verify); the deep check
    /// reports a mismatch itself). Lengths and state bits are still checked:
    /// they keep a damaged value from panicking the decoder.
    pub fn decode_header_unverified(map_key: &[u8], b: &[u8]) -> Result<Item> {
        if b.len() < HEADER {
            return Err(StoreError::damaged(map_key, "shorter than its header"));
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let mut f = [0u8; 4];
        f.copy_from_slice(&b[0..4]);
        let state = b[27];
        if state & !(STATE_STALE | STATE_TOKEN_SENT) != 0 {
            return Err(StoreError::damaged(map_key, "unknown item state bits"));
        }
        Ok(Item {
            flags: u32::from_le_bytes(f),
            exptime: u64_at(4),
            cas: u64_at(12),
            time: u64_at(20) & TIME_MAX,
            stale: state & STATE_STALE != 0,
            token_sent: state & STATE_TOKEN_SENT != 0,
            data: Vec::new(),
        })
    }

    /// Has the item's expiry passed at `now`?
    pub fn expired(&self, now: u64) -> bool {
        self.exptime != 0 && now >= self.exptime
    }

    /// Seconds of life left at `now` (`None` = never expires).
    pub fn ttl(&self, now: u64) -> Option<u64> {
        (self.exptime != 0).then(|| self.exptime.saturating_sub(now))
    }
}

/// The checksum of an item (module docs, "Item format 2"): CRC32C of the
/// map key, the 28 header bytes before the checksum, and the data.
fn item_crc(map_key: &[u8], head: &[u8], data: &[u8]) -> u32 {
    let c = crc32c::crc32c(map_key);
    let c = crc32c::crc32c_append(c, head);
    crc32c::crc32c_append(c, data)
}

/// Checks item `value` stored under map key `map_key` as every read does
/// (the deep check's walk, [`verify_items`]).
pub(crate) fn verify_item(map_key: &[u8], value: &[u8]) -> Result<()> {
    Item::decode_header(map_key, value).map(|_| ())
}

/// What [`verify_items`] found in a map.
#[derive(Debug, Default)]
pub struct ItemCheck {
    /// Items whose checksum and fields verified.
    pub items: u64,
    /// The damaged ones: (client key shown, reason).
    pub damaged: Vec<(String, &'static str)>,
    /// The map keys of the damaged ones, in the same order (what a repair
    /// deletes them by).
    pub damaged_keys: Vec<Vec<u8>>,
}

/// Verifies every item of the map behind `kv` (the deep check of a
/// server pool): refuses a map of another item format
/// ([`StoreError::Format`]), lists each damaged item by key.
pub fn verify_items(kv: &mut dyn Kv) -> Result<ItemCheck> {
    check_format(kv)?;
    let mut c = ItemCheck::default();
    // Every record, not only the `k` ones: an item whose first key byte
    // was damaged is no longer under `k` and must be reported too.
    kv.scan_checked(&mut |k, v| {
        let why = match v {
            // The map's own record check failed: the item with it.
            Err(_) => "checksum mismatch",
            Ok(v) => match k.first() {
                Some(b'k') => match verify_item(k, v) {
                    Ok(()) => {
                        c.items += 1;
                        return;
                    }
                    Err(StoreError::Damaged { reason, .. }) => reason,
                    Err(_) => "does not decode",
                },
                _ if k == META_FORMAT || k == META_CAS => return,
                _ if k == META_FLUSH && v.len() == 16 => return,
                _ if k == META_FLUSH => "a flush marker of the wrong length",
                _ => "a key that is neither an item's nor a server record's (a damaged key byte)",
            },
        };
        c.damaged.push((client_key_shown(k), why));
        c.damaged_keys.push(k.to_vec());
    })?;
    Ok(c)
}

/// Is the map's item format this build's? `Ok(true)`: it says so;
/// `Ok(false)`: the map holds no item and no format record (new); an
/// error: another format ([`StoreError::Format`]).
pub(super) fn check_format(kv: &mut dyn Kv) -> Result<bool> {
    let mut buf = Vec::new();
    if kv.get_into(META_FORMAT, &mut buf)? {
        if buf == FORMAT {
            return Ok(true);
        }
        return Err(StoreError::Format {
            found: format!("format record '{}'", buf.escape_ascii()),
        });
    }
    // No record: a new map, or one the first format filled. Every item
    // store of that format reserved CAS ids first (`\0cas`), except one
    // given its CAS by the client (meta E) — hence the scan, which on a
    // new map sees nothing.
    let old = || StoreError::Format {
        found: "item format 1 (no checksum, no format record)".into(),
    };
    if kv.get_into(META_CAS, &mut buf)? {
        return Err(old());
    }
    let mut any = false;
    kv.scan_prefix(b"k", &mut |_, _| any = true)?;
    if any {
        return Err(old());
    }
    Ok(false)
}

/// An expiry as stored: 0 = never, 1 = long ago (already expired).
pub(super) fn stored_exptime(e: Expiry) -> u64 {
    match e {
        Expiry::Never => 0,
        Expiry::At(t) => t.max(1),
        Expiry::Expired => 1,
    }
}
