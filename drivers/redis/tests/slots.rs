//! Redis Cluster hash slots against a real, cluster-enabled `redis-server`: [`key_slot`]
//! answers what `CLUSTER KEYSLOT` answers.

use leasehold_redis::{hash_tag, key_slot};
use leasehold_redis_harness::RedisServer;

/// A cluster-enabled server that owns no slots: enough for `CLUSTER KEYSLOT`.
fn cluster_node() -> RedisServer {
    RedisServer::builder()
        .args(["--cluster-enabled", "yes"])
        .start()
        .unwrap_or_else(|e| panic!("these tests need redis-server: {e}"))
}

fn server_slot(server: &RedisServer, key: &[u8]) -> u16 {
    let reply = server
        .command([b"CLUSTER".as_slice(), b"KEYSLOT".as_slice(), key])
        .unwrap();
    let slot = reply
        .as_int()
        .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key:?}: {reply:?}"));
    u16::try_from(slot).unwrap()
}

/// Names rich in what the hash-tag rule looks at: braces in every arrangement, empty and nested
/// tags, non-ASCII and non-UTF-8 bytes. Deterministic (xorshift from a fixed state).
fn names() -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = [
        "",
        "{",
        "}",
        "{}",
        "}{",
        "{{}}",
        "{a}",
        "a}b",
        "odd{}name",
        "{a}b}",
        "a{b",
        "x}{a}",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{user1000}.following",
        "orders",
        "{app}:orders",
        "é{ü}",
        "\u{1F600}",
        "{\u{1F600}}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let pieces: [&[u8]; 12] = [
        b"{",
        b"}",
        b"{}",
        b"a",
        b"b",
        b":",
        b"orders",
        "é".as_bytes(),
        b"\xff",
        b"\x00",
        b" ",
        b"\xc3",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut random = |max: u64| -> Vec<u8> {
        let len = next() % (max + 1);
        (0..len)
            .flat_map(|_| {
                pieces[(next() % pieces.len() as u64) as usize]
                    .iter()
                    .copied()
            })
            .collect()
    };
    for _ in 0..200 {
        names.push(random(8));
        // Often a tag: prefix `{` content `}` suffix, each part random (the content may be
        // empty or hold braces itself).
        let mut name = random(3);
        name.push(b'{');
        name.extend(random(3));
        name.push(b'}');
        name.extend(random(3));
        names.push(name);
    }
    names
}

#[test]
fn key_slot_agrees_with_cluster_keyslot() {
    let server = cluster_node();
    let names = names();
    let mut tagged = 0;
    for name in &names {
        assert_eq!(
            key_slot(name),
            server_slot(&server, name),
            "{:?}",
            String::from_utf8_lossy(name)
        );
        tagged += usize::from(hash_tag(name).is_some());
    }
    // The generated names cover both rules.
    assert!(
        tagged > 100 && names.len() - tagged > 100,
        "{tagged} of {}",
        names.len()
    );
}
