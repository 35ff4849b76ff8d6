"""Codecs protocols share: AMQP 1.0 values and messages, bounded decompression in every framing."""
