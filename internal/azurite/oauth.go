package azurite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// SelfSignedCert writes a fresh self-signed certificate for 127.0.0.1, ::1
// and localhost, valid for a day, and its private key into dir as cert.pem
// and key.pem, for Options.TLSCert and TLSKey. pool trusts the certificate:
// give it to the clients (tls.Config.RootCAs).
func SelfSignedCert(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, fmt.Errorf("azurite: generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", nil, fmt.Errorf("azurite: generating a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Azurite for leaderelection tests"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, fmt.Errorf("azurite: creating the certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, fmt.Errorf("azurite: parsing the certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", nil, fmt.Errorf("azurite: encoding the key: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, fmt.Errorf("azurite: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		return "", "", nil, fmt.Errorf("azurite: %w", err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}

// Audience is the audience of a token for Azure Storage, which Azurite's
// OAuth accepts (it also accepts the account's own blob endpoint).
const Audience = "https://storage.azure.com"

// Token returns an unsigned JWT bearer token that Azurite started with
// Options.OAuth accepts from now until expires, if audience is one Azurite
// accepts (such as Audience). Azurite checks the claims Azure AD would set,
// its audience, issuer (an Azure AD tenant's), not-before, expiry and
// issue time, but not the signature.
func Token(audience string, expires time.Time) string {
	now := time.Now()
	enc := func(v any) string {
		b, _ := json.Marshal(v) // maps of strings and numbers always marshal
		return base64.RawURLEncoding.EncodeToString(b)
	}
	header := enc(map[string]string{"alg": "none", "typ": "JWT"})
	claims := enc(map[string]any{
		"aud": audience,
		"iss": "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/",
		"iat": now.Add(-time.Minute).Unix(),
		"nbf": now.Add(-time.Minute).Unix(),
		"exp": expires.Unix(),
		"oid": "00000000-0000-0000-0000-000000000001",
		"sub": "leaderelection-tests",
	})
	return header + "." + claims + "."
}
