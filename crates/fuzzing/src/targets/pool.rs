//! `ferrite-pmem`: the 4 KiB pool header (`Header::decode`, `Pool::open_image`).

use crate::image::{Bases, Image, fix_header_crc, normalise_header, pool_opts};
use crate::patch::Input;
use ferrite_pmem::{Domain, HEADER_SIZE, Header, Pool};
use std::sync::OnceLock;

const LAYOUT: &str = "fuzz-pool";

pub(crate) fn bases() -> &'static Bases {
    static B: OnceLock<Bases> = OnceLock::new();
    B.get_or_init(|| {
        let mut images = Vec::new();
        for (i, size) in [8u64 << 10, 16 << 10].into_iter().enumerate() {
            let p = Pool::create_in_memory(&pool_opts(LAYOUT, size)).expect("create pool");
            p.set_root::<u8>(ferrite_pmem::POff::new(HEADER_SIZE as u64))
                .expect("set root");
            let mut bytes = p.image();
            normalise_header(&mut bytes);
            images.push(Image { config: i, bytes });
        }
        Bases::new(LAYOUT, images)
    })
}

/// The pool header on a patched real pool. Option bit 0 recomputes the
/// header checksum after patching, so the fuzzer reaches the field checks
/// behind it. Checks: an accepted header describes the image (size within
/// it, a valid layout name), encodes back to the very bytes it was decoded
/// from (nothing ignored that the format says must be zero), and a pool
/// opens on it with the same header and a data area of `size - 4096`.
pub fn pool_header(data: &[u8]) {
    let b = bases();
    let input = Input::decode(data);
    let (img, _) = input.apply_with(b, |img| {
        if input.options & 1 == 1 {
            fix_header_crc(img);
        }
    });
    let Ok(h) = Header::decode(&img, img.len() as u64) else {
        return;
    };
    assert!(h.size <= img.len() as u64, "header size beyond the image");
    assert!(
        ferrite_pmem::header::check_layout_name(&h.layout).is_ok(),
        "accepted an invalid layout name"
    );
    let mut enc = vec![0u8; HEADER_SIZE];
    h.encode(&mut enc);
    assert_eq!(
        enc[..128],
        img[..128],
        "accepted a header that does not encode back to its bytes"
    );
    let opts = pool_opts(&h.layout, h.size);
    let pool = Pool::open_image(&img, &opts, Domain::Volatile, None)
        .expect("a header that decodes opens as a pool");
    assert_eq!(pool.header(), &h);
    assert_eq!(pool.data().len() as u64, h.size - HEADER_SIZE as u64);
}
