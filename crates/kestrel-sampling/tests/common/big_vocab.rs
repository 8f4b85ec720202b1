//! A synthetic vocabulary of realistic shape, for the mask bench and large-vocabulary tests.

/// `n` token byte strings: 256 byte tokens, words with and without a leading space in
/// several casings, digits, punctuation runs, whitespace runs, accented and CJK pieces, and a
/// few empty special tokens (the last is EOG).
pub fn synthetic_vocab(n: usize) -> (Vec<Vec<u8>>, u32) {
    let mut v: Vec<Vec<u8>> = (0u16..256).map(|b| vec![b as u8]).collect();
    for _ in 0..16 {
        v.push(Vec::new());
    }
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let letters = b"etaoinshrdlcumwfgypbvkjxqz";
    let punct = b".,;:!?\"'()[]{}<>-_=+*/\\|@#$%^&~`";
    let cjk = [
        "的", "一", "是", "不", "了", "人", "我", "在", "有", "他", "こ", "の", "は", "ー", "ン",
        "é", "è", "ü", "ñ", "ö", "ж", "я", "и",
    ];
    let mut seen = std::collections::HashSet::new();
    while v.len() < n - 1 {
        let kind = next() % 100;
        let mut t: Vec<u8> = Vec::new();
        match kind {
            0..=54 => {
                // a word, skewed toward common letters, 2..14 letters, often with a leading space
                if next() % 3 != 0 {
                    t.push(b' ');
                }
                let len = 2 + (next() % 7 + next() % 7) as usize;
                for i in 0..len {
                    let r = (next() % 26) as usize;
                    let c = letters[(r * r) / 26];
                    t.push(if i == 0 && next() % 4 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    });
                }
            }
            55..=64 => {
                let len = 1 + next() % 4;
                for _ in 0..len {
                    t.push(b'0' + (next() % 10) as u8);
                }
            }
            65..=74 => {
                let len = 1 + next() % 3;
                for _ in 0..len {
                    t.push(punct[(next() % punct.len() as u64) as usize]);
                }
                if next() % 2 == 0 {
                    t.push(b' ');
                }
            }
            75..=79 => {
                let len = 1 + next() % 8;
                let c = [b' ', b'\n', b'\t'][(next() % 3) as usize];
                t.extend(std::iter::repeat_n(c, len as usize));
            }
            _ => {
                let len = 1 + next() % 4;
                if next() % 4 == 0 {
                    t.push(b' ');
                }
                for _ in 0..len {
                    t.extend_from_slice(cjk[(next() % cjk.len() as u64) as usize].as_bytes());
                }
            }
        }
        if seen.insert(t.clone()) {
            v.push(t);
        }
    }
    v.push(Vec::new());
    let eog = (v.len() - 1) as u32;
    (v, eog)
}
