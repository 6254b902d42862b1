//! Measures what p12-keystore 0.4.1 spends opening a PKCS#12 archive whose encrypted
//! container (PBES2, PBKDF2 2,048 iterations: passes the pre-scan) holds `k` shrouded key
//! bags, each at the decoder's own cap: PBKDF2-SHA256 10^6 iterations, or scrypt with
//! 128*N*r = 1 GiB and p = 16.
use pkcs5::der::Encode;
use std::time::Instant;

fn der(tag: u8, c: &[u8]) -> Vec<u8> {
    let mut o = vec![tag];
    let n = c.len();
    if n < 0x80 {
        o.push(n as u8)
    } else {
        let b = (n as u32).to_be_bytes();
        let s = b.iter().take_while(|x| **x == 0).count();
        o.push(0x80 | (4 - s) as u8);
        o.extend_from_slice(&b[s..]);
    }
    o.extend_from_slice(c);
    o
}
fn seq(p: &[Vec<u8>]) -> Vec<u8> {
    der(0x30, &p.concat())
}
const PBES2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];
fn alg(p: &pkcs5::pbes2::Parameters) -> Vec<u8> {
    seq(&[der(0x06, PBES2), p.to_der().unwrap()])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args[1].as_str();
    let k: usize = args[2].parse().unwrap();
    let rsa = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    let pki = seq(&[
        der(0x02, &[0]),
        seq(&[der(0x06, &rsa), der(0x05, &[])]),
        der(0x04, &[1; 8]),
    ]);
    let t = Instant::now();
    let bag_params = match kind {
        "pbkdf2" => {
            pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(1_000_000, &[7; 8], [3; 16])
                .unwrap()
        }
        _ => pkcs5::pbes2::Parameters::generate_scrypt_aes256cbc(
            scrypt::Params::new(20, 8, 16).unwrap(),
            &[7; 8],
            [3; 16],
        )
        .unwrap(),
    };
    let enc_key = bag_params.encrypt(b"", &pki).unwrap();
    eprintln!("building one bag took {:?}", t.elapsed());
    let shrouded = [
        0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x0a, 0x01, 0x02,
    ];
    let bag = seq(&[
        der(0x06, &shrouded),
        der(0xa0, &seq(&[alg(&bag_params), der(0x04, &enc_key)])),
    ]);
    let bags: Vec<Vec<u8>> = (0..k).map(|_| bag.clone()).collect();
    let outer =
        pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(2048, &[9; 8], [4; 16]).unwrap();
    let ct = outer.encrypt(b"", &seq(&bags)).unwrap();
    let data = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01];
    let encdata = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x06];
    let container = seq(&[
        der(0x06, &encdata),
        der(
            0xa0,
            &seq(&[
                der(0x02, &[0]),
                seq(&[der(0x06, &data), alg(&outer), der(0x80, &ct)]),
            ]),
        ),
    ]);
    let pfx = seq(&[
        der(0x02, &[3]),
        seq(&[der(0x06, &data), der(0xa0, &der(0x04, &seq(&[container])))]),
    ]);
    let budget = 1024 * 1024 * 3 / 4 - 200; // client_secret's base64 in a 1 MiB file
    println!(
        "kind={kind} bag_bytes={} bags_in_1MiB_file={}",
        bag.len(),
        budget / bag.len()
    );
    let t = Instant::now();
    let r = p12_keystore::Pkcs12Archive::from_pkcs12(&pfx, "");
    let el = t.elapsed();
    let hwm = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap()
        .to_owned();
    println!(
        "k={k} archive_bytes={} decode={:?} per_bag={:?} keys={:?} {hwm}",
        pfx.len(),
        el,
        el / k as u32,
        r.map(|a| a.keys.len())
    );
}
