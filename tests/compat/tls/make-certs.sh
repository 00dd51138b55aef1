#!/usr/bin/env bash
# Makes the TLS material of the security tests in DIR (PEM files, with openssl):
#   ca.pem / ca.key              a test CA
#   server.pem (chain + key)     the broker's certificate for 127.0.0.1 and localhost, signed by the CA
#   server-cert.pem, server.key  the same, certificate and key apart
#   client.pem / client.key      a client certificate (CN=client-1,O=Weir Tests), signed by the CA
#   client.p12                   the same as PKCS#12 (password "changeit"), for Java
#   truststore.p12               the CA as a PKCS#12 trust store (password "changeit"), for Java
#   other-ca.pem                 another CA
#   other-client.pem / .key      a client certificate signed by the other CA
# Usage: make-certs.sh DIR
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
days=3650
ca() { # name subject
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days $days \
    -subj "$2" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
leaf() { # name subject ca ext
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" \
    -days $days -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "/CN=Weir Test CA"
ca other-ca "/CN=Other Test CA"
leaf server-cert "/CN=localhost" ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
mv server-cert.key server.key
cat server-cert.pem server.key > server.pem
leaf client "/O=Weir Tests/CN=client-1" ca "extendedKeyUsage=clientAuth"
leaf other-client "/CN=intruder" other-ca "extendedKeyUsage=clientAuth"
openssl pkcs12 -export -in client.pem -inkey client.key -out client.p12 -passout pass:changeit -name client 2>/dev/null
if command -v keytool >/dev/null; then
  rm -f truststore.p12
  keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 -storetype PKCS12 -storepass changeit >/dev/null 2>&1
fi
rm -f ./*.srl
