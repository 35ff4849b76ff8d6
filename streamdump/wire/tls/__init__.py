"""TLS as the capture shows it: records reassembled from a direction's bytes, the hellos read,
the secrets of an NSS key log turned into record keys, and records decrypted into the plain
byte stream the framing engine then cuts into the inner protocol's frames.

keylog.py reads key logs (files, and pcapng Decryption Secrets Blocks); records.py cuts records
out of a byte stream; handshake.py reads ClientHello and ServerHello; suites.py names the
cipher suites and what each needs; schedule.py derives keys (TLS 1.3's HKDF-Expand-Label and
TLS 1.2's PRF); protection.py opens one record (AEAD or CBC with its MAC); connection.py keeps
one connection's state in both directions. Every primitive comes from `cryptography`.
"""
