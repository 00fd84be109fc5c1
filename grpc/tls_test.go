package ratekitgrpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
)

// pki is a certificate authority made for one test, and the certificates
// it issues.
type pki struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{t, cert, key, pool}
}

var serial int64 = 1

// issue returns a certificate of the CA for tmpl's subject and names.
func (p *pki) issue(tmpl *x509.Certificate, usage x509.ExtKeyUsage) tls.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(p.t, err)
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	require.NoError(p.t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveTLS serves the test service over TLS with the server certificate
// of ca and clientAuth, limited by ClientCert, and returns a connection
// that presents client (none when nil) and the keys the limiter saw.
func serveTLS(t *testing.T, ca *pki, clientAuth tls.ClientAuthType, client *tls.Certificate) (*grpc.ClientConn, chan string) {
	t.Helper()
	serverCert := ca.issue(&x509.Certificate{Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	keys := make(chan string, 1)
	key := func(ctx context.Context, m string) (string, error) {
		k, err := ratekitgrpc.ClientCert(ctx, m)
		keys <- k
		return k, err
	}
	lim := adaptertest.Limiter(t, nil, core.Limit{Name: "api", Rate: core.PerMinute(5)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: clientAuth, ClientCAs: ca.pool, MinVersion: tls.VersionTLS13})),
		grpc.ChainUnaryInterceptor(ratekitgrpc.UnaryServerInterceptor(lim, key, ratekitgrpc.WithLogger(quiet))),
	)
	srv.RegisterService(&testService, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cfg := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS13}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn, keys
}

// ClientCert keys a call by the SPIFFE ID, else the subject, of a client
// certificate that the server verified; a certificate the server did not
// verify, or none, is a missing key (InvalidArgument), never an identity.
func TestClientCertMTLS(t *testing.T) {
	ca := newPKI(t)
	spiffe, err := url.Parse("spiffe://example.org/billing")
	require.NoError(t, err)
	billing := ca.issue(&x509.Certificate{Subject: pkix.Name{CommonName: "billing", Organization: []string{"Example"}}, URIs: []*url.URL{spiffe}}, x509.ExtKeyUsageClientAuth)
	orders := ca.issue(&x509.Certificate{Subject: pkix.Name{CommonName: "orders", Organization: []string{"Example"}}}, x509.ExtKeyUsageClientAuth)
	// A certificate of another CA, which only a server that does not
	// verify accepts.
	forged := newPKI(t).issue(&x509.Certificate{Subject: pkix.Name{CommonName: "billing", Organization: []string{"Example"}}, URIs: []*url.URL{spiffe}}, x509.ExtKeyUsageClientAuth)

	for _, c := range []struct {
		name       string
		clientAuth tls.ClientAuthType
		client     *tls.Certificate
		want       string // "" for a missing key
	}{
		{"SPIFFE ID", tls.RequireAndVerifyClientCert, &billing, "spiffe://example.org/billing"},
		{"subject", tls.RequireAndVerifyClientCert, &orders, "CN=orders,O=Example"},
		{"verified if given, none given", tls.VerifyClientCertIfGiven, nil, ""},
		{"verified if given", tls.VerifyClientCertIfGiven, &orders, "CN=orders,O=Example"},
		{"server without verification", tls.RequireAnyClientCert, &billing, ""},
		{"server without verification, other CA", tls.RequireAnyClientCert, &forged, ""},
		{"server asks for no certificate", tls.NoClientCert, &billing, ""},
	} {
		conn, keys := serveTLS(t, ca, c.clientAuth, c.client)
		got, _, err := echo(conn, context.Background(), "Echo", "hi")
		assert.Equal(t, c.want, <-keys, c.name)
		if c.want == "" {
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", c.name, err)
			assert.NotContains(t, err.Error(), "billing", c.name)
		} else {
			require.NoError(t, err, c.name)
			assert.Equal(t, "hi", got, c.name)
		}
	}
}
