//! The token a new grant holds, and the lock a grant makes: a server-made token (128
//! random bits, kept packed) or the caller's own; the token a waiter will hold once
//! granted.

use super::{LockState, Session};
use crate::token::{self, TokenText};

/// The token a new grant holds: one the server makes (128 random bits, kept packed and
/// spelled as 32 lowercase hexadecimal digits only when read), or the caller's own,
/// read where it is (the lock copies what it keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewToken<'a> {
    Made([u8; 16]),
    Given(&'a [u8]),
}

impl<'a> NewToken<'a> {
    /// The token as the holder proves it: what a lock granted to it reads back.
    pub fn text(&self) -> TokenText<'a> {
        match self {
            NewToken::Made(bytes) => TokenText::Spelled(token::spelled(bytes)),
            NewToken::Given(text) => TokenText::Kept(text),
        }
    }

    /// The token for a grant: the caller's own, or a new server-made one.
    pub fn for_grant(own: Option<&'a [u8]>) -> NewToken<'a> {
        match own {
            Some(own) => NewToken::Given(own),
            None => {
                let mut bytes = [0u8; 16];
                rand::fill(&mut bytes);
                NewToken::Made(bytes)
            }
        }
    }
}

impl LockState {
    /// A lock granted now to `token`, publishing `value`, to the connection `client`
    /// (0: none): see [`LockState::build`].
    pub fn granted(
        token: NewToken,
        (fence, acquired_ms): (u64, i64),
        session: Option<Session>,
        value: Option<&[u8]>,
        client: u64,
    ) -> Self {
        match (token, value) {
            (NewToken::Made(bytes), None) => {
                LockState::packed(bytes, fence, acquired_ms, session, client)
            }
            (token, value) => {
                LockState::build(&token.text(), fence, acquired_ms, session, value, client)
            }
        }
    }
}

/// Whether `token` holds `held`: the only test that release and extend apply (the
/// tests' model of it; the commands ask `LockValue::holds`).
#[cfg(test)]
pub fn is_held_by(held: Option<&LockState>, token: &[u8]) -> bool {
    held.is_some_and(|lock| lock.holds(token))
}

/// A server-made token: 128 bits from a cryptographically secure generator (the
/// thread-local ChaCha12 generator, seeded and reseeded from the operating system),
/// written as 32 lowercase hexadecimal characters.
#[cfg(test)]
pub fn new_token() -> Vec<u8> {
    token_buffer(None)
}

/// The token a waiter will hold once granted (the caller's own, or a new server-made
/// one), as its own copy: the wait outlives the command's arguments.
pub fn token_buffer(own: Option<&[u8]>) -> Vec<u8> {
    match own {
        Some(token) => token.to_vec(),
        None => {
            let mut bytes = [0u8; 16];
            rand::fill(&mut bytes);
            token::spelled(&bytes).to_vec()
        }
    }
}
