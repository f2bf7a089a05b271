//go:build unix

package azurite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// tokenCredential hands out one fixed token.
type tokenCredential string

func (c tokenCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(c), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// tokenClient is an azblob client for blobURL that trusts pool and
// authenticates with token.
func tokenClient(t *testing.T, blobURL string, pool *x509.CertPool, token string) *azblob.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	t.Cleanup(tr.CloseIdleConnections)
	client, err := azblob.NewClient(blobURL, tokenCredential(token), &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}, Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	noErr(t, err)
	return client
}

func TestStartWithTLSAndOAuthAcceptsValidTokensOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cert, key, pool, err := SelfSignedCert(t.TempDir())
	noErr(t, err)
	s := start(t, ctx, Options{TLSCert: cert, TLSKey: key, OAuth: true})
	check(t, strings.HasPrefix(s.URL(), "https://127.0.0.1:"), "URL %s", s.URL())

	good := tokenClient(t, s.URL(), pool, Token(Audience, time.Now().Add(time.Hour)))
	_, err = good.CreateContainer(ctx, "with-a-token", nil)
	noErr(t, err, "a token with valid claims")

	for name, token := range map[string]string{
		"wrong audience": Token("https://vault.azure.net", time.Now().Add(time.Hour)),
		"expired":        Token(Audience, time.Now().Add(-time.Minute)),
	} {
		_, err = tokenClient(t, s.URL(), pool, token).CreateContainer(ctx, "refused", nil)
		check(t, bloberror.HasCode(err, bloberror.AuthenticationFailed, bloberror.InvalidAuthenticationInfo),
			"%s: want 401/403 AuthenticationFailed, got %v", name, err)
	}

	// The account key still works, over https.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	t.Cleanup(tr.CloseIdleConnections)
	check(t, strings.Contains(s.ConnectionString(), "DefaultEndpointsProtocol=https;"), "connection string %s", s.ConnectionString())
	keyClient, err := azblob.NewClientFromConnectionString(s.ConnectionString(), &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}},
	})
	noErr(t, err)
	_, err = keyClient.CreateContainer(ctx, "with-the-key", nil)
	noErr(t, err, "account key over https")
}

func TestOAuthWithoutTLSIsRefused(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{OAuth: true})
	check(t, err != nil && strings.Contains(err.Error(), "OAuth needs TLSCert"), "Start: %v", err)
}
