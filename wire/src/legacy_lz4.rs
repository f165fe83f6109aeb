//! LZ4 wrappers of message format v0: Kafka before 0.10 computed the LZ4 frame's header checksum
//! over the frame's magic number as well (KAFKA-3160, KIP-57), so a standard LZ4 reader refuses
//! them ("header checksum invalid"). [`fix_v0_header`] rewrites that one byte as LZ4 defines it.

use bytes::Bytes;

/// The LZ4 frame magic number, little-endian.
const FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// The frame with its header checksum computed as LZ4 defines it (over the frame descriptor,
/// without the magic number); anything that is not an LZ4 frame is returned unchanged.
pub(crate) fn fix_v0_header(frame: Bytes) -> Bytes {
    if frame.len() < 7 || frame[..4] != FRAME_MAGIC {
        return frame;
    }
    let flags = frame[4];
    // FLG, BD, then the content size (flag bit 3) and the dictionary ID (bit 0).
    let descriptor =
        2 + if flags & 0x08 != 0 { 8 } else { 0 } + if flags & 0x01 != 0 { 4 } else { 0 };
    let hc_at = 4 + descriptor;
    if frame.len() <= hc_at {
        return frame;
    }
    let hc = ((xxh32(&frame[4..hc_at], 0) >> 8) & 0xff) as u8;
    if frame[hc_at] == hc {
        return frame;
    }
    let mut fixed = frame.to_vec();
    fixed[hc_at] = hc;
    Bytes::from(fixed)
}

const P1: u32 = 2_654_435_761;
const P2: u32 = 2_246_822_519;
const P3: u32 = 3_266_489_917;
const P4: u32 = 668_265_263;
const P5: u32 = 374_761_393;

fn word(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn round(acc: u32, input: u32) -> u32 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(13)
        .wrapping_mul(P1)
}

/// XXH32, the checksum of LZ4 frames.
fn xxh32(data: &[u8], seed: u32) -> u32 {
    let mut rest = data;
    let mut h = if data.len() >= 16 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while rest.len() >= 16 {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, word(&rest[i * 4..]));
            }
            rest = &rest[16..];
        }
        v[0].rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18))
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(data.len() as u32);
    while rest.len() >= 4 {
        h = h
            .wrapping_add(word(rest).wrapping_mul(P3))
            .rotate_left(17)
            .wrapping_mul(P4);
        rest = &rest[4..];
    }
    for &b in rest {
        h = h
            .wrapping_add((b as u32).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh32_matches_the_reference() {
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(
            xxh32(b"Nobody inspects the spammish repetition", 0),
            0xE229_3B2F
        );
    }

    #[test]
    fn a_v0_header_checksum_is_rewritten_and_a_right_one_kept() {
        let mut out = bytes::BytesMut::new();
        let plain = b"some records, some records, some records".to_vec();
        crate::records::compress(crate::batch::Codec::Lz4, &plain, &mut out).unwrap();
        let good = out.freeze();
        assert_eq!(
            fix_v0_header(good.clone()),
            good,
            "a right checksum is kept"
        );
        // What Kafka 0.9 wrote: the checksum over the magic number and the descriptor.
        let flags = good[4];
        let end =
            4 + 2 + if flags & 0x08 != 0 { 8 } else { 0 } + if flags & 0x01 != 0 { 4 } else { 0 };
        let mut broken = good.to_vec();
        broken[end] = ((xxh32(&good[..end], 0) >> 8) & 0xff) as u8;
        assert_ne!(broken[end], good[end]);
        let broken = Bytes::from(broken);
        assert!(crate::records::decompress(crate::batch::Codec::Lz4, broken.clone()).is_err());
        let fixed = fix_v0_header(broken);
        assert_eq!(fixed, good);
        assert_eq!(
            crate::records::decompress(crate::batch::Codec::Lz4, fixed)
                .unwrap()
                .as_ref(),
            plain.as_slice()
        );
        let other = Bytes::from_static(b"not lz4");
        assert_eq!(fix_v0_header(other.clone()), other);
    }
}
