package blobstore

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnectionStringForms(t *testing.T) {
	c, err := parseConnectionString("UseDevelopmentStorage=true")
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:10000/devstoreaccount1/", c.serviceURL)
	assert.Equal(t, devAccountName, c.accountName)
	assert.Equal(t, devAccountKey, c.accountKey)

	c, err = parseConnectionString("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite")
	require.NoError(t, err)
	assert.Equal(t, "http://azurite:10000/devstoreaccount1/", c.serviceURL)

	c, err = parseConnectionString("AccountName=acct;AccountKey=" + fakeKey)
	require.NoError(t, err)
	assert.Equal(t, "https://acct.blob.core.windows.net/", c.serviceURL)

	c, err = parseConnectionString("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + fakeKey + ";EndpointSuffix=core.chinacloudapi.cn")
	require.NoError(t, err)
	assert.Equal(t, "https://acct.blob.core.chinacloudapi.cn/", c.serviceURL)

	c, err = parseConnectionString("BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=?sv=2023&sig=x")
	require.NoError(t, err)
	assert.Equal(t, "sv=2023&sig=x", c.sas)
	assert.Equal(t, "https://acct.blob.core.windows.net/", c.serviceURL)
}

// Every refusal names the field and says what to write, and never shows
// the string's values.
func TestConnectionStringsRefusedSayWhy(t *testing.T) {
	for cs, rule := range map[string]string{
		"UseDevelopmentStorage=true;BlobEndpoint=http://127.0.0.1:10999/devstoreaccount1": "UseDevelopmentStorage=true names Azurite's endpoint (127.0.0.1:10000), account and key itself: it takes no other key but DevelopmentStorageProxyUri, found BlobEndpoint. " +
			"For an emulator elsewhere, give the development account and the endpoint: AccountName=devstoreaccount1;AccountKey=<its published key>;BlobEndpoint=http://<host>:<port>/devstoreaccount1",
		"UseDevelopmentStorage=true;AccountName=devstoreaccount1;AccountKey=" + fakeKey: "it takes no other key but DevelopmentStorageProxyUri, found AccountName, AccountKey.",
		"AccountName=acct;" + fakeKey + ";x":                                            "is malformed: expected Key=Value pairs separated by semicolons",
		"BlobEndpoint=ftp://x;SharedAccessSignature=sig=" + fakeKey:                     "BlobEndpoint must be an absolute http(s) URL",
		"AccountName=acct;AccountKey=" + fakeKey + ";DefaultEndpointsProtocol=ftp":      "DefaultEndpointsProtocol must be https or http",
		"AccountKey=" + fakeKey: "needs AccountName or BlobEndpoint (or UseDevelopmentStorage=true)",
		"BlobEndpoint=https://acct.blob.core.windows.net;AccountKey=" + fakeKey: "has AccountKey but no AccountName",
		"AccountName=acct": "needs AccountKey (with AccountName) or SharedAccessSignature",
		"BlobEndpoint=http://azurite:10000/acct;SharedAccessSignature=sv=1&sig=" + fakeKey: "must use https: a SAS token is a secret (plain http is accepted only for a local emulator on a loopback address)",
		"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + fakeKey:             "must use https with an account key (plain http is accepted only for an emulator: on a loopback address, or with the emulator's development account, whose key is public)",
	} {
		err := CheckConnectionString(cs)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, cs)
		assert.Equal(t, "ConnectionString", ce.Field)
		assert.Contains(t, ce.Rule, rule, cs)
		assert.True(t, strings.HasPrefix(err.Error(), "leaderelection: invalid BlobSettings.ConnectionString: "), err.Error())
		assert.NotContains(t, err.Error(), fakeKey)
		_, err = New(Config{ConnectionString: cs, Container: "c"})
		assert.ErrorAs(t, err, &ce, "New refuses it too")
	}
}

// A misspelt or unknown key is named (with the key it likely misspells),
// together with what the string then lacks; a bad UseDevelopmentStorage
// value is shown; and nothing that may be a secret is, not even a key whose
// place a pasted value took.
func TestConnectionStringMistakesAreNamed(t *testing.T) {
	for _, tc := range []struct{ cs, want string }{
		{"AccountNmae=acct;AccountKey=" + fakeKey, "has an unknown key AccountNmae (did you mean AccountName?); needs AccountName or BlobEndpoint (or UseDevelopmentStorage=true)"},
		{"AccountName=acct;AcountKey=" + fakeKey, "has an unknown key AcountKey (did you mean AccountKey?); needs AccountKey (with AccountName) or SharedAccessSignature"},
		{"AccountName=acct;AccountKey=" + fakeKey + ";Foo=1;BlobEndpiont=https://acct.blob.core.windows.net",
			"has unknown keys Foo, BlobEndpiont (did you mean BlobEndpoint?)"},
		{"AccountName=acct;AccountKey=" + fakeKey + ";Region=westeurope", "has an unknown key Region (the keys are DefaultEndpointsProtocol, AccountName, AccountKey,"},
		{"AccountName=acct;" + fakeKey + "=;AccountKey=" + fakeKey, "has an unknown key <a key not shown: it is not a key name and may be a secret>"},
		{"UseDevelopmentStorage=ture", `UseDevelopmentStorage must be true (the only value it takes), got "ture"`},
		{"UseDevelopmentStorage=false", `UseDevelopmentStorage must be true (the only value it takes), got "false"`},
		{"UseDevelopmentStorage=" + fakeKey, "UseDevelopmentStorage must be true (the only value it takes), got REDACTED"},
		{"UseDevelopmentStorage=true;AccountNmae=x", "has an unknown key AccountNmae (did you mean AccountName?); UseDevelopmentStorage=true names Azurite's endpoint"},
	} {
		err := CheckConnectionString(tc.cs)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, tc.cs)
		assert.Equal(t, "ConnectionString", ce.Field)
		assert.Contains(t, ce.Rule, tc.want, tc.cs)
		assert.NotContains(t, err.Error(), fakeKey)
		assert.NotContains(t, err.Error(), strings.TrimRight(fakeKey, "="))
	}
	// Every key a portal, Azurite's documentation or .NET's parser writes is known.
	assert.NoError(t, CheckConnectionString("BlobEndpoint=https://a.blob.core.windows.net/;QueueEndpoint=https://a.queue.core.windows.net/;"+
		"FileEndpoint=https://a.file.core.windows.net/;TableEndpoint=https://a.table.core.windows.net/;SharedAccessSignature=sv=2023&sig=x"))
	assert.NoError(t, CheckConnectionString("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="+devAccountKey+
		";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"))
	assert.NoError(t, CheckConnectionString("accountname=acct;ACCOUNTKEY="+fakeKey+";BlobSecondaryEndpoint=https://acct-secondary.blob.core.windows.net"), "keys are matched whatever their case")
}

// Plain http is accepted wherever no secret crosses a network in clear.
func TestPlainHTTPIsAcceptedOnlyForTheEmulator(t *testing.T) {
	for _, cs := range []string{
		"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + devAccountKey + ";BlobEndpoint=http://azurite:10000/devstoreaccount1;",
		"UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite",
		"AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://127.0.0.1:10000/acct",
		"AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://[::1]:10000/acct",
		"BlobEndpoint=http://localhost:10000/devstoreaccount1;SharedAccessSignature=sv=2023-01-01&sig=abc",
		"BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=abc",
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + fakeKey,
	} {
		assert.NoError(t, CheckConnectionString(cs), cs)
	}
}

func TestServiceURLMayBePathStyleWhereTheHostCannotNameTheAccount(t *testing.T) {
	for _, u := range []string{
		"https://127.0.0.1:10000/devstoreaccount1",
		"https://[::1]:10000/devstoreaccount1/",
		"https://localhost:10000/devstoreaccount1",
		"https://azurite:10000/devstoreaccount1",
		"https://host.docker.internal:10000/devstoreaccount1",
		"https://10.0.0.4/myaccount",
		"https://acct.blob.core.windows.net/",
	} {
		assert.NoError(t, CheckServiceURL(u), u)
	}
	for u, rule := range map[string]string{
		"https://acct.blob.core.windows.net/leases":      `must be the account's endpoint, without a path (put the container in Container), got path "/leases"`,
		"https://127.0.0.1:10000/devstoreaccount1/lease": "one path segment, the account name",
		"https://localhost:10000/Dev_Account":            "one path segment, the account name",
		"http://127.0.0.1:10000/devstoreaccount1":        `must use https (token credentials are never sent in clear), got "http"`,
		"https://acct.blob.core.windows.net/?sv=1":       "must not carry a query string or fragment; put a SAS URL in SASURL",
		"https://u:p@acct.blob.core.windows.net/":        "must not carry a user name or password: the Credential authenticates",
		"acct.blob.core.windows.net":                     "must be an absolute URL such as https://myaccount.blob.core.windows.net/",
	} {
		err := CheckServiceURL(u)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, u)
		assert.Equal(t, "ServiceURL", ce.Field)
		assert.Contains(t, ce.Rule, rule, u)
	}
}

// The SDK parses only IP addresses as path-style; for a host name without
// dots the account is the first path segment too.
func TestSASURLOnAHostWithoutDotsNamesTheAccountInItsPath(t *testing.T) {
	for raw, want := range map[string]string{
		"http://localhost:10000/devstoreaccount1?sv=2023-01-01&sig=abc":        "http://localhost:10000/devstoreaccount1/leases?sig=abc&sv=2023-01-01",
		"https://azurite:10000/devstoreaccount1/leases?sv=2023-01-01&sig=abc":  "https://azurite:10000/devstoreaccount1/leases?sig=abc&sv=2023-01-01",
		"http://127.0.0.1:10000/devstoreaccount1/leases?sv=2023-01-01&sig=abc": "http://127.0.0.1:10000/devstoreaccount1/leases?sig=abc&sv=2023-01-01",
		"https://acct.blob.core.windows.net/?sv=2023-01-01&sig=abc":            "https://acct.blob.core.windows.net/leases?sig=abc&sv=2023-01-01",
	} {
		got, err := sasContainerURL(raw, "leases")
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	for raw, rule := range map[string]string{
		"https://azurite:10000/devstoreaccount1/other?sv=2023-01-01&sig=" + sig:     `names container "other" but Container is "leases"`,
		"https://azurite:10000/devstoreaccount1/leases/b?sv=2023-01-01&sig=" + sig:  "must name the account or the container, not a blob",
		"https://acct.blob.core.windows.net/leases?sv=2023-01-01":                   "has no SAS token (no sig= parameter)",
		"http://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig:         "must use https: a SAS token is a secret",
		"ftp://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig:          "must be an absolute http(s) URL of the account or the container, with a SAS token",
		"https://acct.blob.core.windows.net/leases/x?sv=2023-01-01&sig=" + sig + "": "not a blob",
	} {
		err := CheckSASURL(raw, "leases")
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, raw)
		assert.Equal(t, "SASURL", ce.Field)
		assert.Contains(t, ce.Rule, rule, raw)
		assert.NotContains(t, err.Error(), sig)
	}
}

// A config error reads as the root's SettingsError, word for word.
func TestConfigErrorsReadAsTheRootsSettingsErrors(t *testing.T) {
	err := CheckConnectionString("AccountName=acct")
	assert.EqualError(t, err, "leaderelection: invalid BlobSettings.ConnectionString: needs AccountKey (with AccountName) or SharedAccessSignature")
	_, err = New(Config{Container: "c"})
	assert.EqualError(t, err, "leaderelection: invalid BlobSettings.ConnectionString: no storage account given: set one of ConnectionString, ServiceURL, SASURL or Client")
}

// accountSAS signs an account SAS for Azurite's development account.
func accountSAS(t *testing.T) string {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azurite.AccountName, azurite.AccountKey)
	require.NoError(t, err)
	q, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   (&sas.AccountPermissions{Read: true, Write: true, Create: true, Delete: true, List: true}).String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	require.NoError(t, err)
	return q.Encode()
}

// endpointOf is the BlobEndpoint of a connection string.
func endpointOf(t *testing.T, conn string) string {
	t.Helper()
	for part := range strings.SplitSeq(conn, ";") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.EqualFold(k, "BlobEndpoint") {
			return strings.TrimRight(v, "/")
		}
	}
	t.Fatalf("no BlobEndpoint in the connection string")
	return ""
}

// roundTrip creates a blob, leases it and lists it, through cl.
func roundTrip(t *testing.T, cl *Client) {
	t.Helper()
	ctx := t.Context()
	b := cl.Blob("source")
	_, err := b.Create(ctx, WriteOptions{Metadata: md("k", "v")})
	require.NoError(t, err)
	_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
	require.NoError(t, err)
	require.NoError(t, b.ReleaseLease(ctx, idA, Call{}))
	n := 0
	for page, err := range cl.List(ctx, ListOptions{Metadata: true}) {
		require.NoError(t, err)
		n += len(page.Items)
	}
	assert.Equal(t, 1, n)
}

// A connection string (the env's own), a SAS URL and a caller's client
// each reach the container, on both backends.
func TestEverySourceReachesTheContainer(t *testing.T) {
	t.Parallel()
	for _, source := range []string{"SAS URL", "SAS URL on localhost", "caller's client", "SAS in a connection string"} {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, e *env) {
				endpoint := endpointOf(t, e.conn)
				token := "sv=2023-01-01&sig=abc"
				if e.svc == nil {
					token = accountSAS(t)
				}
				cl := e.client(t, func(c *Config) {
					switch source {
					case "SAS URL":
						c.ConnectionString, c.SASURL = "", endpoint+"?"+token
					case "SAS URL on localhost":
						c.ConnectionString, c.SASURL = "", strings.Replace(endpoint, "127.0.0.1", "localhost", 1)+"/"+e.name+"?"+token
					case "SAS in a connection string":
						c.ConnectionString = "BlobEndpoint=" + endpoint + ";SharedAccessSignature=" + token
					case "caller's client":
						var opts *azblob.ClientOptions
						if e.svc != nil {
							opts = &azblob.ClientOptions{ClientOptions: e.svc.ClientOptions()}
						} else {
							tr := newTransport()
							t.Cleanup(tr.CloseIdleConnections)
							opts = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
						}
						client, err := azblob.NewClientFromConnectionString(e.conn, opts)
						require.NoError(t, err)
						c.ConnectionString, c.ClientOptions, c.Client = "", nil, client
					}
				})
				roundTrip(t, cl)
				assert.False(t, cl.OwnsTransport() && source == "caller's client")
			})
		})
	}
}

// A service URL with a token credential reaches the container: on an https
// Azurite that takes bearer tokens.
func TestATokenCredentialReachesTheContainer(t *testing.T) {
	t.Parallel()
	srv, pool := azuritetest.HTTPS(t)
	tr := newTransport()
	tr.TLSClientConfig.RootCAs = pool
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := New(Config{ServiceURL: srv.URL(), Container: containerName(),
		Credential:    tokenFunc(func() (string, error) { return azurite.Token(azurite.Audience, time.Now().Add(time.Hour)), nil }),
		ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}})
	require.NoError(t, err)
	require.NoError(t, cl.CreateContainer(t.Context(), Call{}))
	roundTrip(t, cl)
}

// Without a credential the client builds DefaultAzureCredential, sending
// nothing until a request needs a token.
func TestNoCredentialMeansDefaultAzureCredential(t *testing.T) {
	cl, err := New(Config{ServiceURL: "https://acct.blob.core.windows.net/", Container: "c"})
	require.NoError(t, err)
	assert.True(t, cl.OwnsTransport())
	cl.CloseIdleConnections()
}

// The package builds a transport of its own only when the caller brings
// none, sized as configured.
func TestTheTransportIsTheCallersWhenGiven(t *testing.T) {
	cl, err := New(Config{ConnectionString: "UseDevelopmentStorage=true", Container: "c"})
	require.NoError(t, err)
	require.True(t, cl.OwnsTransport())
	assert.Equal(t, 10, cl.transport.MaxIdleConnsPerHost, "the SDK's default")
	cl, err = New(Config{ConnectionString: "UseDevelopmentStorage=true", Container: "c", MaxIdleConnsPerHost: 40})
	require.NoError(t, err)
	assert.Equal(t, 40, cl.transport.MaxIdleConnsPerHost)
	another, err := New(Config{ConnectionString: "UseDevelopmentStorage=true", Container: "c"})
	require.NoError(t, err)
	assert.NotSame(t, cl.transport, another.transport, "a pool per client")

	cl, err = New(Config{ConnectionString: "UseDevelopmentStorage=true", Container: "c", MaxIdleConnsPerHost: 40,
		ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &silent{}}}})
	require.NoError(t, err)
	assert.False(t, cl.OwnsTransport())
	cl.CloseIdleConnections() // nothing to close: the caller's
	assert.Equal(t, defaultRequestTimeout, cl.RequestTimeout())
	assert.Equal(t, "c", cl.Container())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = cl.Blob("b").Properties(ctx, Call{})
	assert.ErrorIs(t, err, context.Canceled)
}
