#!/usr/bin/env bash
# A test CA and a server certificate for localhost / 127.0.0.1, made with openssl into DIR
# (ca.pem, server.pem, server.key); kept when they are there already. The brokers' TLS
# listeners (.ci/run) and the TLS recordings (record.py) use them.
set -euo pipefail
dir=${1:?usage: make_pki.sh DIR}
mkdir -p "$dir"
cd "$dir"
if [ -s ca.pem ] && [ -s server.pem ] && [ -s server.key ]; then
  exit 0
fi
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=streamdump test CA" \
  -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
  -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
# A test key for a local broker: readable by the broker's own user.
chmod 644 server.key ca.key
