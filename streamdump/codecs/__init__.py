"""Floor 2, codecs: well-kept libraries wrapped once, pure and bounded, importing nothing else of
streamdump. AMQP 1.0 values and messages, bounded decompression in every framing clients use,
lenient JSON, the protobuf wire format, and the Lua twins of what the plugin needs of them."""
