//! The lock state's tests.
use super::*;

#[test]
fn only_values_within_the_contract_are_accepted_from_outside() {
    assert!(in_contract(b"t", 1, 0));
    assert!(in_contract(&[0; 256], MAX_FENCE, MAX_TIME_MS));
    assert!(!in_contract(b"", 1, 0));
    assert!(!in_contract(&[0; 257], 1, 0));
    assert!(!in_contract(b"t", 0, 0));
    assert!(!in_contract(b"t", MAX_FENCE + 1, 0));
    assert!(!in_contract(b"t", 1, -1));
    assert!(!in_contract(b"t", 1, MAX_TIME_MS + 1));
}

fn held(token: &[u8]) -> LockState {
    LockState::new(token, 7, 1, None)
}

#[test]
fn a_binding_is_kept_after_the_token_and_costs_plain_locks_nothing() {
    assert_eq!(std::mem::size_of::<LockState>(), 24);
    let session = Session {
        grace_ms: 5_000,
        client: u64::MAX,
    };
    let mut lock = LockState::new(b"mine", 9, 3, Some(session));
    assert_eq!(lock.heap_bytes(), HEADER + 4 + 16);
    assert_eq!(
        (&*lock.token(), lock.fence(), lock.acquired_ms()),
        (&b"mine"[..], 9, 3)
    );
    assert_eq!(lock.session(), Some(session));
    assert_eq!(lock.heap_bytes(), HEADER + 4 + 16);
    lock.set_session(None);
    assert_eq!(
        (&*lock.token(), lock.fence(), lock.session()),
        (&b"mine"[..], 9, None)
    );
    assert_eq!(lock.heap_bytes(), HEADER + 4);
    lock.set_session(None);
    assert_eq!(lock, held(b"mine").with_fence_and_time(9, 3));
}

impl LockState {
    fn with_fence_and_time(self, fence: u64, acquired_ms: i64) -> Self {
        LockState::new(&self.token(), fence, acquired_ms, self.session())
    }
}

#[test]
fn a_plain_lock_granted_on_the_wall_clock_is_kept_whole_in_its_value() {
    let now: i64 = 1_763_000_000_000;
    let fence = (now as u64) << LOGICAL_BITS | 5;
    let made = [7u8; 16];
    let lock = LockState::granted(NewToken::Made(made), (fence, now), None, None, 0);
    assert_eq!(lock.heap_bytes(), 0, "compact");
    assert_eq!((lock.fence(), lock.acquired_ms()), (fence, now));
    assert_eq!(*lock.token(), token::spelled(&made));
    assert!(lock.holds(&token::spelled(&made)));
    assert_eq!(
        lock,
        LockState::new(&token::spelled(&made), fence, now, None)
    );

    // A grant time the fence does not name (the clock ran ahead), a binding, or a
    // token of another form: one allocation beside the value, the same answers.
    for (fence, acquired, session) in [
        (fence, now - 1, None),
        (
            fence,
            now,
            Some(Session {
                grace_ms: 0,
                client: 3,
            }),
        ),
        (MAX_FENCE, MAX_TIME_MS, None),
    ] {
        let mut lock =
            LockState::granted(NewToken::Made(made), (fence, acquired), session, None, 0);
        assert_eq!(
            lock.heap_bytes(),
            HEADER + 16 + if session.is_some() { 16 } else { 0 }
        );
        assert_eq!(
            (lock.fence(), lock.acquired_ms(), lock.session()),
            (fence, acquired, session)
        );
        assert!(lock.holds(&token::spelled(&made)));
        assert!(!lock.holds(b"0123456789abcdef0123456789abcdef"));
        lock.set_session(None);
        let compact = u64::try_from(acquired) == Ok(fence >> LOGICAL_BITS);
        assert_eq!(
            lock.heap_bytes() == 0,
            compact,
            "canonical form after unbinding"
        );
        assert_eq!(
            (lock.fence(), lock.acquired_ms(), lock.session()),
            (fence, acquired, None)
        );
    }
}

#[test]
fn a_grant_reads_back_the_token_it_was_made_with() {
    let hex = b"0123456789abcdef0123456789abcdef";
    for token in [
        NewToken::Made([0xa5; 16]),
        NewToken::Given(hex),
        NewToken::Given(b"a-uuid-with-dashes"),
    ] {
        for session in [
            None,
            Some(Session {
                grace_ms: 1,
                client: 2,
            }),
        ] {
            let lock = LockState::granted(token.clone(), (9 << LOGICAL_BITS, 9), session, None, 0);
            assert_eq!(*lock.token(), *token.text(), "{token:?}");
            assert!(lock.holds(&token.text()));
        }
    }
}

#[test]
fn only_the_exact_token_holds() {
    let lock = held(b"mine");
    assert!(is_held_by(Some(&lock), b"mine"));
    assert!(!is_held_by(Some(&lock), b"min"));
    assert!(!is_held_by(Some(&lock), b"mine\0"));
    assert!(!is_held_by(None, b"mine"));
}

#[test]
fn server_tokens_are_32_lowercase_hex_and_differ() {
    let a = new_token();
    let b = new_token();
    assert_eq!(a.len(), 32);
    assert!(
        a.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    );
    assert_ne!(a, b);
}

#[test]
fn a_published_value_is_kept_beside_any_form_and_changes_nothing_else() {
    let token = new_token();
    let session = Some(Session {
        grace_ms: 500,
        client: 9,
    });
    for (token, session) in [
        (&token[..], None),
        (&token[..], session),
        (&b"own token"[..], None),
        (&b"own token"[..], session),
    ] {
        for value in [
            &b""[..],
            b"10.0.0.1:6379",
            &[0u8, 255, 7][..],
            &[b'v'; 4096][..],
        ] {
            let fence = (1_700_000_000_000u64 << LOGICAL_BITS) | 3;
            let mut lock =
                LockState::with_value(token, fence, 1_700_000_000_000, session, Some(value));
            assert_eq!(lock.value(), Some(value));
            assert!(lock.holds(token));
            assert_eq!(
                (lock.fence(), lock.acquired_ms()),
                (fence, 1_700_000_000_000)
            );
            assert_eq!(lock.session(), session);
            assert_eq!(lock.cell_form(), None, "a cell keeps no value");
            lock.set_session(None);
            assert_eq!(lock.value(), Some(value), "rebinding keeps the value");
            lock.set_value(Some(b"next"));
            assert_eq!(lock.value(), Some(&b"next"[..]));
            assert!(lock.holds(token));
            assert_eq!(lock.clone(), lock);
            lock.set_value(None);
            assert_eq!(lock.value(), None);
            assert_eq!(lock, LockState::new(token, fence, 1_700_000_000_000, None));
        }
    }
    assert_eq!(
        LockState::new(&token, 1 << LOGICAL_BITS, 1, None).value(),
        None
    );
}

#[test]
fn a_compact_lock_keeps_its_connection_slot_beside_a_fence_of_every_size() {
    for slot in [0, 1, 7, 8, 1000, super::connections::SLOTS - 1] {
        for fence in [1, (1 << 53) - 1, 1_838_378_060_229_633] {
            let (mark, bytes) = super::compact_parts(fence, slot);
            assert_eq!(super::compact_slot(mark, &bytes), slot);
            assert_eq!(super::from_seven(&bytes) & super::FENCE_BITS, fence);
        }
    }
}

#[test]
fn a_lock_names_the_connection_it_was_granted_to_in_every_form() {
    let now: i64 = 1_763_000_000_000;
    let fence = (now as u64) << LOGICAL_BITS | 5;
    let client = 9_100_001;
    // Compact: the slot, no allocation.
    let lock = LockState::granted(NewToken::Made([3; 16]), (fence, now), None, None, client);
    assert_eq!(lock.heap_bytes(), 0);
    assert_eq!(
        (lock.client(), lock.fence(), lock.acquired_ms()),
        (client, fence, now)
    );
    // Its copy names it too, after the original is gone; equal whatever they name.
    let copy = lock.clone();
    drop(lock);
    assert_eq!(copy.client(), client);
    let mut renamed = copy.clone();
    renamed.set_client(9_100_002);
    assert_eq!((renamed.client(), copy.client()), (9_100_002, client));
    assert_eq!(
        renamed, copy,
        "the connection is not part of what a lock holds"
    );
    renamed.set_client(0);
    assert_eq!(renamed.client(), 0);
    // Boxed (a token of another form, a value, a binding): the id itself.
    let session = Some(Session {
        grace_ms: 100,
        client: 7,
    });
    let token = NewToken::Given(b"worker-1");
    let mut boxed = LockState::granted(token, (fence, now), session, Some(b"addr"), client);
    assert_eq!(boxed.client(), client);
    assert_eq!(&*boxed.token(), b"worker-1");
    assert_eq!(
        (boxed.session(), boxed.value()),
        (session, Some(&b"addr"[..]))
    );
    boxed.set_value(Some(b"other"));
    boxed.set_session(None);
    assert_eq!(
        (boxed.client(), boxed.value()),
        (client, Some(&b"other"[..]))
    );
    assert!(boxed.holds(b"worker-1"));
    // What arrives from elsewhere names nobody.
    assert_eq!(LockState::new(b"x", fence, now, None).client(), 0);
}
