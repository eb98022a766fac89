"""The ``cluster-secret`` handshake: both ends of a bus link prove they know it.

Beyond Disque. When nodes share a secret, every bus link starts with a
challenge-response before its first frame, so a process that does not know the
secret can neither join nor feed messages to the cluster, nor receive them:

1. the accepting side sends ``CHALLENGE_TAG + nonce_a`` (32 random bytes);
2. the connecting side answers ``nonce_c + HMAC(secret, "client" | nonce_a | nonce_c)``;
3. the accepting side checks it and answers ``HMAC(secret, "server" | nonce_c | nonce_a)``,
   which the connecting side checks before it uses the link.

Fresh nonces on both sides make every proof single-use, the role labels keep
one side's proof from being replayed as the other's, and proofs are compared
in constant time. Each step is one length-prefixed payload
(:func:`disquette.protocol.frames.encode_payload`).
"""

from __future__ import annotations

import hashlib
import hmac

CHALLENGE_TAG = b"disquette-bus-auth-1"
NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
MAX_AUTH_PAYLOAD = len(CHALLENGE_TAG) + NONCE_BYTES + PROOF_BYTES


def _proof(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + b"|" + first + b"|" + second, hashlib.sha256).digest()


def challenge(nonce_a: bytes) -> bytes:
    """Step 1, accepting side."""
    return CHALLENGE_TAG + nonce_a


def answer(secret: bytes, challenge_payload: bytes, nonce_c: bytes) -> bytes | None:
    """Step 2, connecting side: the response to a challenge, None if it is not one."""
    if len(challenge_payload) != len(CHALLENGE_TAG) + NONCE_BYTES or not (
        challenge_payload.startswith(CHALLENGE_TAG)
    ):
        return None
    nonce_a = challenge_payload[len(CHALLENGE_TAG) :]
    return nonce_c + _proof(secret, b"client", nonce_a, nonce_c)


def check_answer(secret: bytes, nonce_a: bytes, response: bytes) -> bytes | None:
    """Step 3, accepting side: the server's proof if the response is right, else None."""
    if len(response) != NONCE_BYTES + PROOF_BYTES:
        return None
    nonce_c, proof = response[:NONCE_BYTES], response[NONCE_BYTES:]
    if not hmac.compare_digest(proof, _proof(secret, b"client", nonce_a, nonce_c)):
        return None
    return _proof(secret, b"server", nonce_c, nonce_a)


def check_server_proof(secret: bytes, nonce_a: bytes, nonce_c: bytes, proof: bytes) -> bool:
    """Last check, connecting side: the accepting side knows the secret too."""
    return hmac.compare_digest(proof, _proof(secret, b"server", nonce_c, nonce_a))
