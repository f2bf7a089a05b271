package leaderelection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fakeKey = "c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5cw=="

func validSettings() BlobSettings {
	return BlobSettings{
		ConnectionString: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + fakeKey + ";EndpointSuffix=core.windows.net",
		Container:        "leases",
		Blob:             "coordinator",
	}
}

func TestDefaultsAreValidAndDocumented(t *testing.T) {
	s := validSettings()
	require.NoError(t, s.Validate())
	d := s.withDefaults()
	assert.Equal(t, 15*time.Second, d.LeaseDuration)
	assert.Equal(t, 5*time.Second, d.RenewInterval)
	assert.Equal(t, 2*time.Second, d.RetryInterval)
	assert.Equal(t, 3*time.Second, d.StopMargin)
	assert.Equal(t, 4*time.Second, d.RequestTimeout)
}

func TestEveryInvalidSettingIsRejectedNamingTheField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*BlobSettings)
		field string
		rule  string
	}{
		{"no source", func(s *BlobSettings) { s.ConnectionString = "" }, "ConnectionString", "no storage account"},
		{"two sources", func(s *BlobSettings) { s.ServiceURL = "https://acct.blob.core.windows.net/" }, "ServiceURL", "only one"},
		{"credential without service URL", func(s *BlobSettings) { s.Credential = fakeCredential{} }, "Credential", "only used with ServiceURL"},
		{"malformed connection string", func(s *BlobSettings) { s.ConnectionString = "garbage" }, "ConnectionString", "malformed"},
		{"connection string without key", func(s *BlobSettings) { s.ConnectionString = "AccountName=acct" }, "ConnectionString", "AccountKey"},
		{"connection string key misspelt", func(s *BlobSettings) {
			s.ConnectionString = "AccountNmae=acct;AccountKey=c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5cw=="
		}, "ConnectionString", "unknown key AccountNmae (did you mean AccountName?); needs AccountName"},
		{"development storage not true", func(s *BlobSettings) { s.ConnectionString = "UseDevelopmentStorage=ture" }, "ConnectionString", `got "ture"`},
		{"connection string key not base64", func(s *BlobSettings) {
			s.ConnectionString = "AccountName=acct;AccountKey=not*base64!"
		}, "ConnectionString", "base64"},
		{"service URL over http", func(s *BlobSettings) {
			s.ConnectionString, s.ServiceURL = "", "http://acct.blob.core.windows.net/"
		}, "ServiceURL", "https"},
		{"service URL relative", func(s *BlobSettings) { s.ConnectionString, s.ServiceURL = "", "acct" }, "ServiceURL", "absolute"},
		{"SAS URL without token", func(s *BlobSettings) {
			s.ConnectionString, s.SASURL = "", "https://acct.blob.core.windows.net/leases"
		}, "SASURL", "no SAS token"},
		{"SAS URL for another container", func(s *BlobSettings) {
			s.ConnectionString, s.SASURL = "", "https://acct.blob.core.windows.net/other?sv=2023-01-01&sig=abc"
		}, "SASURL", `"other"`},
		{"missing container", func(s *BlobSettings) { s.Container = "" }, "Container", "required"},
		{"container too short", func(s *BlobSettings) { s.Container = "ab" }, "Container", "3 to 63"},
		{"container uppercase", func(s *BlobSettings) { s.Container = "Leases" }, "Container", "lowercase"},
		{"container double hyphen", func(s *BlobSettings) { s.Container = "my--leases" }, "Container", "consecutive"},
		{"container leading hyphen", func(s *BlobSettings) { s.Container = "-leases" }, "Container", "start and end"},
		{"missing blob", func(s *BlobSettings) { s.Blob = "" }, "Blob", "required"},
		{"blob ends with dot", func(s *BlobSettings) { s.Blob = "lease." }, "Blob", "dot or a slash"},
		{"blob too long", func(s *BlobSettings) { s.Blob = strings.Repeat("x", 1025) }, "Blob", "1024"},
		{"lease too short", func(s *BlobSettings) { s.LeaseDuration = 2999 * time.Millisecond }, "LeaseDuration", "from 3s to 24h0m0s"},
		{"lease too long", func(s *BlobSettings) { s.LeaseDuration = 24*time.Hour + time.Second }, "LeaseDuration", "from 3s to 24h0m0s"},
		{"lease infinite", func(s *BlobSettings) { s.LeaseDuration = -1 }, "LeaseDuration", "from 3s to 24h0m0s"},
		{"native lease fractional", func(s *BlobSettings) { s.LeaseDuration = 15500 * time.Millisecond }, "LeaseDuration", "whole number of seconds from 15s to 60s"},
		{"margin below a hundredth of a long lease", func(s *BlobSettings) {
			s.LeaseDuration, s.StopMargin = time.Hour, 30*time.Second
		}, "StopMargin", "LeaseDuration/100 = 36s"},
		{"request timeout too large for a short ETag lease", func(s *BlobSettings) {
			s.LeaseDuration, s.RequestTimeout = 3*time.Second, 1500*time.Millisecond
		}, "RequestTimeout", "LeaseDuration - StopMargin - RenewInterval = 1s"},
		{"renew too close to a short ETag lease", func(s *BlobSettings) {
			s.LeaseDuration, s.RenewInterval = 4*time.Second, 2*time.Second
		}, "RenewInterval", "(LeaseDuration - StopMargin)/2 = 1.5s"},
		{"renew negative", func(s *BlobSettings) { s.RenewInterval = -time.Second }, "RenewInterval", "at least 500ms"},
		{"renew too fast", func(s *BlobSettings) { s.RenewInterval = time.Nanosecond }, "RenewInterval", "at least 500ms"},
		{"service URL with a path", func(s *BlobSettings) {
			s.ConnectionString, s.ServiceURL = "", "https://acct.blob.core.windows.net/leases"
		}, "ServiceURL", "without a path"},
		{"SAS URL over http", func(s *BlobSettings) {
			s.ConnectionString, s.SASURL = "", "http://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=abc"
		}, "SASURL", "https"},
		{"service URL with a SAS", func(s *BlobSettings) {
			s.ConnectionString, s.ServiceURL = "", "https://acct.blob.core.windows.net/?sv=2023-01-01&sig=abc"
		}, "ServiceURL", "put a SAS URL in SASURL"},
		{"service URL with a password", func(s *BlobSettings) {
			s.ConnectionString, s.ServiceURL = "", "https://user:secret@acct.blob.core.windows.net/"
		}, "ServiceURL", "must not carry a user name or password"},
		{"connection string with an unknown protocol", func(s *BlobSettings) {
			s.ConnectionString = "DefaultEndpointsProtocol=ftp;AccountName=acct;AccountKey=" + fakeKey
		}, "ConnectionString", "DefaultEndpointsProtocol must be https or http"},
		{"connection string SAS over http", func(s *BlobSettings) {
			s.ConnectionString = "BlobEndpoint=http://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=abc"
		}, "ConnectionString", "must use https: a SAS token is a secret"},
		{"connection string SAS over http to a private address", func(s *BlobSettings) {
			s.ConnectionString = "BlobEndpoint=http://10.1.2.3:10000/acct;SharedAccessSignature=sv=2023-01-01&sig=abc"
		}, "ConnectionString", "must use https: a SAS token is a secret"},
		{"connection string key over http", func(s *BlobSettings) {
			s.ConnectionString = "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" + fakeKey
		}, "ConnectionString", "must use https with an account key"},
		{"connection string key over an http endpoint", func(s *BlobSettings) {
			s.ConnectionString = "AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://storage.example.com/acct"
		}, "ConnectionString", "must use https with an account key"},
		{"emulator's account name with another key over http", func(s *BlobSettings) {
			s.ConnectionString = "AccountName=devstoreaccount1;AccountKey=" + fakeKey + ";BlobEndpoint=http://azurite:10000/devstoreaccount1"
		}, "ConnectionString", "must use https with an account key"},
		{"development storage with an endpoint of its own", func(s *BlobSettings) {
			s.ConnectionString = "UseDevelopmentStorage=true;BlobEndpoint=http://127.0.0.1:10999/devstoreaccount1"
		}, "ConnectionString", "takes no other key but DevelopmentStorageProxyUri, found BlobEndpoint"},
		{"client options with a client", func(s *BlobSettings) {
			s.ConnectionString, s.Client, s.ClientOptions = "", &azblob.Client{}, &azblob.ClientOptions{}
		}, "ClientOptions", "not used with Client"},
		{"renew too close to lease", func(s *BlobSettings) { s.RenewInterval = 10 * time.Second }, "RenewInterval", "(LeaseDuration - StopMargin)/2"},
		{"margin too small", func(s *BlobSettings) { s.StopMargin = 500 * time.Millisecond }, "StopMargin", "at least 1s"},
		{"margin too large", func(s *BlobSettings) { s.StopMargin = 8 * time.Second }, "StopMargin", "LeaseDuration/2"},
		{"retry too fast", func(s *BlobSettings) { s.RetryInterval = time.Millisecond }, "RetryInterval", "100ms to 1m0s"},
		{"retry too slow", func(s *BlobSettings) { s.RetryInterval = 2 * time.Minute }, "RetryInterval", "100ms to 1m0s"},
		{"request timeout too small", func(s *BlobSettings) { s.RequestTimeout = time.Millisecond }, "RequestTimeout", "at least"},
		{"request timeout too large", func(s *BlobSettings) { s.RequestTimeout = 8 * time.Second }, "RequestTimeout", "LeaseDuration - StopMargin - RenewInterval = 7s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSettings()
			tc.edit(&s)
			_, err := NewBlobDistributedMutex(s, untilCancelled)
			require.Error(t, err)
			var se *SettingsError
			require.True(t, errors.As(err, &se), "want a *SettingsError, got %T: %v", err, err)
			assert.Equal(t, tc.field, se.Field, "error: %v", err)
			assert.Contains(t, err.Error(), "BlobSettings."+tc.field)
			assert.Contains(t, err.Error(), tc.rule)
			assert.NotContains(t, err.Error(), fakeKey)
		})
	}
}

// Outside Azure's 15-60 s, the lease is an ETag lease, and the defaults
// scale: valid down to 3 s, and capped for long leases so that a holder
// renews at least every minute and its stop margin stays a margin.
func TestLeaseKindAndDefaultsFollowTheLeaseDuration(t *testing.T) {
	for _, tc := range []struct {
		lease                     time.Duration
		kind                      LeaseKind
		margin, renew, reqTimeout time.Duration
	}{
		{3 * time.Second, ETagLease, time.Second, time.Second, time.Second},
		{5 * time.Second, ETagLease, time.Second, 5 * time.Second / 3, 5*time.Second - time.Second - 5*time.Second/3},
		{14 * time.Second, ETagLease, 2800 * time.Millisecond, 14 * time.Second / 3, 4 * time.Second},
		{15 * time.Second, NativeLease, 3 * time.Second, 5 * time.Second, 4 * time.Second},
		{60 * time.Second, NativeLease, 12 * time.Second, 20 * time.Second, 4 * time.Second},
		{61 * time.Second, ETagLease, 12200 * time.Millisecond, 61 * time.Second / 3, 4 * time.Second},
		{3 * time.Minute, ETagLease, 30 * time.Second, time.Minute, 4 * time.Second},
		{time.Hour, ETagLease, 36 * time.Second, time.Minute, 4 * time.Second},
		{24 * time.Hour, ETagLease, 864 * time.Second, time.Minute, 4 * time.Second},
	} {
		t.Run(tc.lease.String(), func(t *testing.T) {
			s := validSettings()
			s.LeaseDuration = tc.lease
			require.NoError(t, s.Validate())
			d := s.withDefaults()
			assert.Equal(t, tc.kind, d.kind())
			assert.Equal(t, tc.margin, d.StopMargin, "StopMargin")
			assert.Equal(t, tc.renew, d.RenewInterval, "RenewInterval")
			assert.Equal(t, tc.reqTimeout, d.RequestTimeout, "RequestTimeout")
			assert.Equal(t, DefaultRetryInterval, d.RetryInterval)
		})
	}
}

func TestDefaultRenewIntervalFitsAGivenStopMargin(t *testing.T) {
	s := validSettings()
	s.StopMargin = 7 * time.Second
	require.NoError(t, s.Validate())
	assert.Equal(t, 4*time.Second, s.withDefaults().RenewInterval, "(15s - 7s)/2")
}

// A path-style account URL is what the emulator and IP-addressed endpoints
// use: accepted where the host cannot name the account (an IP address, or a
// host name without dots), with exactly one path segment, the account name.
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
		s := BlobSettings{ServiceURL: u, Credential: fakeCredential{}, Container: "leases", Blob: "b"}
		assert.NoError(t, s.Validate(), u)
	}
	for u, rule := range map[string]string{
		"https://acct.blob.core.windows.net/leases":      "without a path",
		"https://127.0.0.1:10000/devstoreaccount1/lease": "one path segment, the account name",
		"https://localhost:10000/Dev_Account":            "one path segment, the account name",
		"http://127.0.0.1:10000/devstoreaccount1":        "must use https",
	} {
		s := BlobSettings{ServiceURL: u, Credential: fakeCredential{}, Container: "leases", Blob: "b"}
		err := s.Validate()
		require.Error(t, err, u)
		assert.ErrorContains(t, err, "BlobSettings.ServiceURL", u)
		assert.ErrorContains(t, err, rule, u)
	}
}

// The emulator reads the account from the path for localhost, as the
// library now does: a SAS URL naming localhost reaches the lease.
func TestSASURLOnLocalhostReachesTheEmulator(t *testing.T) {
	t.Parallel()
	s := sasSettings(t, testSettings(t))
	require.Contains(t, s.SASURL, "http://127.0.0.1:")
	s.SASURL = strings.Replace(s.SASURL, "http://127.0.0.1:", "http://localhost:", 1)
	m := newManager(t, s)
	_, err := m.Acquire(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Release(context.Background()))
}

// Plain http is refused wherever a secret would cross the network in clear,
// but the emulator keeps working: on a loopback address, or anywhere with
// its development account, whose key is published (Azurite reached as
// http://azurite:10000 inside a docker-compose network).
func TestPlainHTTPIsAcceptedOnlyForTheEmulator(t *testing.T) {
	for _, cs := range []string{
		"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + azurite.AccountKey + ";BlobEndpoint=http://azurite:10000/devstoreaccount1;",
		"UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite",
		"AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://127.0.0.1:10000/acct",
		"AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://[::1]:10000/acct",
		"BlobEndpoint=http://localhost:10000/devstoreaccount1;SharedAccessSignature=sv=2023-01-01&sig=abc",
		"BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=abc",
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + fakeKey,
	} {
		s := validSettings()
		s.ConnectionString = cs
		assert.NoError(t, s.Validate(), cs)
	}
}

// Settings are safe to print whatever they hold, however they are printed:
// a SAS in the wrong field, a password in a URL, a URL that does not parse.
func TestSettingsPrintWithoutSecrets(t *testing.T) {
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	const password = "hunter2pass"
	for _, s := range []BlobSettings{
		validSettings(),
		{ConnectionString: "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=" + sig, Container: "leases", Blob: "b"},
		{SASURL: "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig, Container: "leases", Blob: "b"},
		{SASURL: "https://user:" + password + "@acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig, Container: "leases", Blob: "b"},
		{SASURL: "https://acct.blob.core.windows.net/%zz?sv=2023-01-01&sig=" + sig, Container: "leases", Blob: "b"},
		{SASURL: "sig=" + sig + "&sv=2023-01-01", Container: "leases", Blob: "b"},
		{ServiceURL: "https://acct.blob.core.windows.net/?sv=2023-01-01&sig=" + sig, Container: "leases", Blob: "b"},
		{ServiceURL: "https://acct.blob.core.windows.net/leases#sig=" + sig, Container: "leases", Blob: "b"},
		{ServiceURL: "https://user:" + password + "@acct.blob.core.windows.net/", Container: "leases", Blob: "b"},
		{ServiceURL: "https://acct.blob.core.windows.net/%zz?sig=" + sig, Container: "leases", Blob: "b"},
		{ServiceURL: "https://acct.blob.core.windows.net/", Credential: fakeCredential{}, Container: "leases", Blob: "b"},
		// A secret put in a name field by mistake.
		{ConnectionString: "UseDevelopmentStorage=true", Container: validSettings().ConnectionString, Blob: "b"},
		{ConnectionString: "UseDevelopmentStorage=true", Container: fakeKey, Blob: "b"},
		{ConnectionString: "UseDevelopmentStorage=true", Container: "leases", Blob: "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig},
		{ConnectionString: "UseDevelopmentStorage=true", Container: "leases", Blob: "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=" + sig},
	} {
		var text, js strings.Builder
		slog.New(slog.NewTextHandler(&text, nil)).Info("settings", "s", s)
		slog.New(slog.NewJSONHandler(&js, nil)).Info("settings", "s", s)
		marshalled, err := json.Marshal(s)
		require.NoError(t, err)
		described := []string{text.String(), js.String(), string(marshalled), fmt.Sprintf("%#v", s), fmt.Sprint(&s),
			fmt.Sprintf("%+v", struct{ S BlobSettings }{s})}
		for _, verb := range []string{"%v", "%+v", "%s", "%q", "%d", "%t"} {
			described = append(described, fmt.Sprintf(verb, s))
		}
		var others []string
		// Not %p, which is for pointers: given a struct, fmt prints its
		// fields raw before consulting any method.
		for _, verb := range []string{"%x", "%10.3v"} {
			others = append(others, fmt.Sprintf(verb, s))
		}
		for _, out := range append(described, others...) {
			require.NotContains(t, out, fakeKey)
			require.NotContains(t, out, sig)
			require.NotContains(t, out, password)
		}
		for _, out := range described {
			assert.Contains(t, out, "Container:", "still says what it is")
		}
	}
	// What is not secret is still shown, to tell settings apart.
	s := BlobSettings{ServiceURL: "https://user:" + password + "@acct.blob.core.windows.net/?sig=" + sig, Container: "leases", Blob: "b"}
	assert.Contains(t, s.String(), "acct.blob.core.windows.net")
}

// A connection string or a SAS URL given as a container or blob name (a
// shell variable passed to the wrong flag) is refused, naming the field,
// and not shown: the blob's name is in every log line and error. The
// prefix of a ShardOwner is its Blob.
func TestNamesHoldingSecretsAreRefusedUnshown(t *testing.T) {
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	secrets := map[string]string{
		"connection string with a key": validSettings().ConnectionString,
		"connection string with a SAS": "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2023-01-01&sig=" + sig,
		"SAS URL":                      "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig,
		"SAS URL ending with a dot":    "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig + ".",
		"SAS URL ending with a slash":  "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=" + sig + "/",
		"SAS token alone":              "sv=2023-01-01&ss=b&srt=co&sp=rwc&sig=" + sig,
		"URL with a query string":      "https://acct.blob.core.windows.net/leases?token=" + sig,
	}
	build := map[string]func(BlobSettings) error{
		"mutex": func(s BlobSettings) error { _, err := NewBlobDistributedMutex(s, untilCancelled); return err },
		"shard owner": func(s BlobSettings) error {
			_, err := NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil })
			return err
		},
	}
	for what, secret := range secrets {
		for _, field := range []string{"Container", "Blob"} {
			for kind, newOwner := range build {
				t.Run(what+" as "+field+" of a "+kind, func(t *testing.T) {
					s := validSettings()
					if field == "Container" {
						s.Container = secret
					} else {
						s.Blob = secret
					}
					err := newOwner(s)
					require.Error(t, err)
					assert.Contains(t, err.Error(), "BlobSettings."+field+": looks like a connection string or a SAS URL")
					assert.NotContains(t, err.Error(), fakeKey)
					assert.NotContains(t, err.Error(), sig)
				})
			}
		}
	}

	// A harmless mistake is still shown, to be found; a bare key is not.
	s := validSettings()
	s.Container, s.Blob = "ab", "lease."
	assert.ErrorContains(t, s.Validate(), `got "ab"`)
	assert.ErrorContains(t, s.Validate(), `got "lease."`)
	s.Container = fakeKey
	require.ErrorContains(t, s.Validate(), "BlobSettings.Container: may contain only lowercase letters, digits and hyphens, got REDACTED")
	assert.NotContains(t, s.Validate().Error(), fakeKey)

	// A name among another owner's blobs is refused by a check of its own
	// (checkOwnName), and an identity goes into every log line: neither
	// shows a secret either.
	s = validSettings()
	s.Blob = "jobs/shards/x?sig=" + sig
	_, err := NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil })
	require.Error(t, err)
	assert.NotContains(t, err.Error(), sig)
	for _, id := range []string{secrets["connection string with a key"], " sig=" + sig, "a\x01sig=" + sig} {
		_, err := NewBlobDistributedMutex(validSettings(), untilCancelled, WithIdentity(id))
		require.ErrorContains(t, err, "identity looks like a connection string or a SAS URL")
		assert.NotContains(t, err.Error(), fakeKey)
		assert.NotContains(t, err.Error(), sig)
	}
}

func TestNilLeaderFuncIsRejected(t *testing.T) {
	_, err := NewBlobDistributedMutex(validSettings(), nil)
	require.ErrorContains(t, err, "leader func is nil")
}

func TestAllInvalidFieldsAreReportedAtOnce(t *testing.T) {
	s := validSettings()
	s.Container, s.Blob, s.LeaseDuration = "X", "", time.Second
	err := s.Validate()
	for _, field := range []string{"Container", "Blob", "LeaseDuration"} {
		assert.Contains(t, err.Error(), "BlobSettings."+field)
	}
}

// A mistake is reported where it was made, once: not again through the
// defaults derived from it, nor through the relations between it and the
// fields it makes meaningless.
func TestEachInvalidTimingIsReportedOnceAndOnlyWhereTheUserSetIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*BlobSettings)
		want []string // the fields reported, in order
	}{
		{"a lease of 15ns, not 15s", func(s *BlobSettings) { s.LeaseDuration = 15 }, []string{"LeaseDuration"}},
		{"an infinite lease", func(s *BlobSettings) { s.LeaseDuration = -1 }, []string{"LeaseDuration"}},
		{"a renewal interval longer than the lease allows", func(s *BlobSettings) { s.RenewInterval = 13 * time.Second }, []string{"RenewInterval"}},
		{"a margin of more than half the lease", func(s *BlobSettings) { s.StopMargin = 8 * time.Second }, []string{"StopMargin"}},
		{"a bad lease and a renewal too fast on any lease", func(s *BlobSettings) {
			s.LeaseDuration, s.RenewInterval = 15, time.Nanosecond
		}, []string{"LeaseDuration", "RenewInterval"}},
		{"a bad renewal interval and a request timeout that fits the defaults", func(s *BlobSettings) {
			s.RenewInterval, s.RequestTimeout = 13*time.Second, 4*time.Second
		}, []string{"RenewInterval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSettings()
			tc.edit(&s)
			assert.Equal(t, tc.want, reportedFields(s.Validate()))
		})
	}

	// Over a grid of timings, zero meaning "not set": only fields the user
	// set are reported, each at most once, and a valid setting's defaults
	// are valid when written out.
	leases := []time.Duration{0, 15, 2 * time.Second, 3 * time.Second, 4 * time.Second, 15 * time.Second, 15500 * time.Millisecond, time.Minute, time.Hour, 25 * time.Hour}
	margins := []time.Duration{0, -time.Second, 500 * time.Millisecond, time.Second, 3 * time.Second, 8 * time.Second, 40 * time.Second}
	renewals := []time.Duration{0, -time.Second, time.Nanosecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 13 * time.Second, 2 * time.Minute}
	timeouts := []time.Duration{0, -time.Second, time.Millisecond, time.Second, 4 * time.Second, 8 * time.Second}
	for _, etagOnly := range []bool{false, true} {
		for _, L := range leases {
			for _, M := range margins {
				for _, R := range renewals {
					for _, T := range timeouts {
						s := validSettings()
						s.LeaseDuration, s.StopMargin, s.RenewInterval, s.RequestTimeout = L, M, R, T
						err := s.validate(etagOnly)
						set := map[string]bool{"LeaseDuration": L != 0, "StopMargin": M != 0, "RenewInterval": R != 0, "RequestTimeout": T != 0}
						seen := map[string]bool{}
						for _, f := range reportedFields(err) {
							require.True(t, set[f], "%+v etagOnly=%v: %s was not set, yet reported: %v", s, etagOnly, f, err)
							require.False(t, seen[f], "%+v etagOnly=%v: %s reported twice: %v", s, etagOnly, f, err)
							seen[f] = true
						}
						if err == nil {
							require.NoError(t, s.withDefaults().validate(etagOnly), "%+v etagOnly=%v: defaults written out", s, etagOnly)
						}
					}
				}
			}
		}
	}
}

// reportedFields lists the fields of the SettingsErrors joined in err.
func reportedFields(err error) []string {
	var fields []string
	if err == nil {
		return fields
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *SettingsError
		if errors.As(e, &se) {
			fields = append(fields, se.Field)
		}
	}
	return fields
}

// UseDevelopmentStorage=true names its endpoint itself: an endpoint given
// beside it (Azurite on another port) is refused with what to write
// instead, not silently replaced by 127.0.0.1:10000.
func TestDevelopmentStorageWithAnEndpointIsRefused(t *testing.T) {
	for _, cs := range []string{
		"UseDevelopmentStorage=true;BlobEndpoint=http://127.0.0.1:10999/devstoreaccount1",
		"BlobEndpoint=http://127.0.0.1:10999/devstoreaccount1;usedevelopmentstorage=TRUE",
		"UseDevelopmentStorage=true;AccountName=devstoreaccount1;AccountKey=" + fakeKey,
	} {
		s := validSettings()
		s.ConnectionString = cs
		err := s.Validate()
		var se *SettingsError
		require.ErrorAs(t, err, &se, cs)
		assert.Equal(t, "ConnectionString", se.Field)
		assert.Contains(t, err.Error(), "takes no other key but DevelopmentStorageProxyUri", cs)
		assert.Contains(t, err.Error(), "BlobEndpoint=http://<host>:<port>/devstoreaccount1", "says what to write instead")
		assert.NotContains(t, err.Error(), fakeKey)
	}
	s := validSettings()
	s.ConnectionString = "UseDevelopmentStorage=true;BlobEndpoint=http://127.0.0.1:10999/devstoreaccount1"
	assert.ErrorContains(t, s.Validate(), "found BlobEndpoint.")

	s.ConnectionString = "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite"
	assert.NoError(t, s.Validate())
}

func TestSecretsNeverInSettingsErrors(t *testing.T) {
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	s := validSettings()
	s.ConnectionString = ""
	s.SASURL = "https://acct.blob.core.windows.net/other?sv=2023-01-01&sig=" + sig
	err := s.Validate()
	require.Error(t, err)
	assert.NotContains(t, err.Error(), sig)

	s.SASURL = "https://acct.blob.core.windows.net/leases/x?sv=2023-01-01&sig=" + sig
	err = s.Validate()
	require.Error(t, err)
	assert.NotContains(t, err.Error(), sig)
}

// Every form of source builds a manager (what each parses to is the storage
// package's: internal/blobstore's TestConnectionStringForms).
func TestConnectionStringForms(t *testing.T) {
	for _, s := range []BlobSettings{
		{ConnectionString: "UseDevelopmentStorage=true", Container: "leases", Blob: "b"},
		{ServiceURL: "https://acct.blob.core.windows.net/", Credential: fakeCredential{}, Container: "leases", Blob: "b"},
		{SASURL: "https://acct.blob.core.windows.net/?sv=2023-01-01&sig=abc", Container: "leases", Blob: "b"},
		{SASURL: "https://acct.blob.core.windows.net/leases?sv=2023-01-01&sig=abc", Container: "leases", Blob: "b"},
	} {
		_, err := NewBlobLeaseManager(s)
		assert.NoError(t, err)
	}
}

type fakeCredential struct{}

func (fakeCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("fake")
}

// A lease manager (mutex.LeaseManager() hands one out) printed or logged
// with any verb shows its settings without their secrets, not its fields.
func TestLeaseManagerPrintsWithoutSecrets(t *testing.T) {
	const key = "c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5"
	s := BlobSettings{ConnectionString: "AccountName=acct;AccountKey=" + key, Container: "leases", Blob: "b"}
	m, err := NewBlobLeaseManager(s, WithLogger(nil))
	require.NoError(t, err)
	var text, js strings.Builder
	slog.New(slog.NewTextHandler(&text, nil)).Info("manager", "m", m)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("manager", "m", m)
	described := []string{text.String(), js.String(), fmt.Sprint(m)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d"} {
		described = append(described, fmt.Sprintf(verb, m))
	}
	for _, out := range described {
		assert.NotContains(t, out, key)
		assert.Contains(t, out, "BlobLeaseManager{BlobSettings{ConnectionString:REDACTED")
	}
}
