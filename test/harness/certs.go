package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a throw-away certificate authority for one test cluster.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// KeyPair is a PEM-encoded certificate and private key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// NewCA creates a self-signed CA valid for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("harness: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("harness: CA cert: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertRequest describes a leaf certificate issued by a CA.
type CertRequest struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
	Validity     time.Duration
}

// Issue signs a new leaf certificate with a fresh P-256 key.
func (ca *CA) Issue(req CertRequest) (KeyPair, error) {
	if !req.Server && !req.Client {
		return KeyPair{}, fmt.Errorf("harness: certificate %q must be for server or client use", req.CommonName)
	}
	if req.Validity <= 0 {
		req.Validity = 24 * time.Hour
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organization},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("harness: issuing %q: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// ServiceAccountKeys returns a PEM private key and matching PEM public key for
// --service-account-signing-key-file / --service-account-key-file.
func ServiceAccountKeys() (priv, pub []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	priv, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return priv, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// clusterPKI is the on-disk certificate material of one cluster.
type clusterPKI struct {
	ca          *CA
	caFile      string
	serverCert  string
	serverKey   string
	adminCert   KeyPair
	saKeyFile   string // private (signing) key
	saPubFile   string
	tokenIssuer string
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

func newClusterPKI(dir, name string) (*clusterPKI, error) {
	ca, err := NewCA("coastguard-e2e-"+name+"-ca", 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	server, err := ca.Issue(CertRequest{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		Server:     true,
		Validity:   7 * 24 * time.Hour,
	})
	if err != nil {
		return nil, err
	}
	admin, err := ca.Issue(CertRequest{CommonName: "coastguard-e2e-admin", Organization: []string{"system:masters"}, Client: true, Validity: 7 * 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	saPriv, saPub, err := ServiceAccountKeys()
	if err != nil {
		return nil, err
	}
	p := &clusterPKI{
		ca:          ca,
		caFile:      filepath.Join(dir, "ca.crt"),
		serverCert:  filepath.Join(dir, "apiserver.crt"),
		serverKey:   filepath.Join(dir, "apiserver.key"),
		adminCert:   admin,
		saKeyFile:   filepath.Join(dir, "sa.key"),
		saPubFile:   filepath.Join(dir, "sa.pub"),
		tokenIssuer: "https://kubernetes.default.svc." + name,
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{p.caFile, ca.CertPEM, 0o644},
		{p.serverCert, server.CertPEM, 0o644},
		{p.serverKey, server.KeyPEM, 0o600},
		{p.saKeyFile, saPriv, 0o600},
		{p.saPubFile, saPub, 0o644},
	} {
		if err := writeFile(f.path, f.data, f.mode); err != nil {
			return nil, fmt.Errorf("harness: writing %s: %w", f.path, err)
		}
	}
	return p, nil
}
