//! How typed messages become payload bytes and back.
//!
//! Two halves, so a type only needs what its side does: a consumer needs [`Decode`] (serde's
//! `Deserialize` for [`Json`]), a producer [`Encode`] (`Serialize`). A [`Codec`] is both; the
//! codecs here ([`Json`], [`Raw`]) are codecs for every type they can handle either way.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A payload that cannot be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("codec error: {0}")]
pub struct CodecError(pub String);

/// Decodes payload bytes into messages of type `M`.
///
/// A message that fails to decode can never succeed: the worker dead-letters it at once
/// (`Outcome::Reject`) instead of retrying it forever.
pub trait Decode<M>: Send + Sync + 'static {
    /// The message in `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<M, CodecError>;
}

/// Encodes messages of type `M` into payload bytes.
pub trait Encode<M>: Send + Sync + 'static {
    /// The bytes for `message`.
    fn encode(&self, message: &M) -> Result<Vec<u8>, CodecError>;
}

/// Both halves: what a producer and a worker of the same stream share.
pub trait Codec<M>: Encode<M> + Decode<M> {}

impl<M, C: Encode<M> + Decode<M>> Codec<M> for C {}

/// serde JSON: the default codec.
#[derive(Debug)]
pub struct Json<M>(PhantomData<fn() -> M>);

impl<M> Default for Json<M> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<M> Clone for Json<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for Json<M> {}

impl<M: DeserializeOwned + 'static> Decode<M> for Json<M> {
    fn decode(&self, bytes: &[u8]) -> Result<M, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError(e.to_string()))
    }
}

impl<M: Serialize + 'static> Encode<M> for Json<M> {
    fn encode(&self, message: &M) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(message).map_err(|e| CodecError(e.to_string()))
    }
}

/// Raw bytes: the payload is the message.
#[derive(Debug, Default, Clone, Copy)]
pub struct Raw;

impl Decode<Vec<u8>> for Raw {
    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
        Ok(bytes.to_vec())
    }
}

impl Encode<Vec<u8>> for Raw {
    fn encode(&self, message: &Vec<u8>) -> Result<Vec<u8>, CodecError> {
        Ok(message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct OnlyDecodable {
        n: u32,
    }

    #[test]
    fn a_type_that_only_deserializes_is_decoded() {
        let json = Json::<OnlyDecodable>::default();
        assert_eq!(json.decode(br#"{"n":7}"#).unwrap(), OnlyDecodable { n: 7 });
        assert!(json.decode(b"not json").is_err());
    }

    #[test]
    fn raw_round_trips_bytes() {
        let bytes = Raw.encode(&vec![0, 159, 146, 150]).unwrap();
        assert_eq!(Raw.decode(&bytes).unwrap(), [0, 159, 146, 150]);
    }
}
