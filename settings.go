package leaderelection

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// Defaults for the timings of [BlobSettings]. The relations between them are
// what matters; see the field docs for the reasons.
const (
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRetryInterval  = 2 * time.Second
	DefaultRequestTimeout = 4 * time.Second

	// MinStopMargin is the smallest accepted StopMargin. Below it, a timer
	// firing late on a loaded machine, or a leader func taking a few hundred
	// milliseconds to notice its cancelled context, could overrun the lease.
	MinStopMargin = time.Second
)

// Azure accepts fixed leases of 15 to 60 seconds (LEASE-FACTS: 14 and 61 give 400 InvalidHeaderValue).
// Any other LeaseDuration from minETagLeaseDuration to maxETagLeaseDuration
// is an ETag lease (see etaglease.go).
const (
	minLeaseDuration  = 15 * time.Second
	maxLeaseDuration  = 60 * time.Second
	minRetryInterval  = 100 * time.Millisecond
	maxRetryInterval  = time.Minute
	minRequestTimeout = 100 * time.Millisecond
	minRenewInterval  = 500 * time.Millisecond
)

// BlobSettings says where the lease lives and how it is timed. Set exactly one
// of ConnectionString, ServiceURL, SASURL or Client, and Container and Blob.
// Zero timings take their defaults. The blob is reserved for the lease: the
// library creates it empty and owns its metadata.
type BlobSettings struct {
	// ConnectionString is a storage account connection string: with
	// AccountName and AccountKey, or with SharedAccessSignature and
	// BlobEndpoint, or "UseDevelopmentStorage=true" for a local Azurite on
	// 127.0.0.1:10000 (alone, or with DevelopmentStorageProxyUri: an
	// endpoint, account or key beside it is refused, not ignored; for an
	// emulator on another port, give AccountName=devstoreaccount1, its
	// AccountKey and BlobEndpoint instead). Plain http (DefaultEndpointsProtocol=http, or an
	// http BlobEndpoint) is accepted only where no secret crosses a network
	// in clear: a loopback address, or, with an account key, the emulator's
	// development account, whose key is published (for example Azurite at
	// http://azurite:10000/devstoreaccount1 in docker compose). A key
	// Azure's connection strings do not have (a misspelt AccountName) is
	// refused, named, rather than ignored.
	ConnectionString string

	// ServiceURL is the account's blob endpoint, e.g.
	// "https://myaccount.blob.core.windows.net/", used with Credential. It
	// must use https. Where the host cannot name the account (an IP
	// address, or a host name without dots such as localhost) the account
	// is the one path segment: "https://127.0.0.1:10000/devstoreaccount1",
	// as for the emulator.
	ServiceURL string

	// Credential authenticates requests to ServiceURL. Nil means
	// azidentity.DefaultAzureCredential (environment, workload identity,
	// managed identity, Azure CLI...). The identity needs the "Storage Blob
	// Data Contributor" role on the container (or the account, if the
	// container must be created). A credential that cannot get a token
	// makes RunTaskWhenMutexAcquired return an error matching ErrPermanent
	// that names it, unless the failure may pass (a timeout, a network
	// error, a 5xx or 429 from the identity endpoint).
	Credential azcore.TokenCredential

	// SASURL is the account's or the container's blob URL with a SAS token,
	// e.g. "https://myaccount.blob.core.windows.net/leases?sv=...&sig=...".
	// The token needs read, write and create permissions (and, if the
	// container must be created by the library, an account SAS). It must
	// use https, but for a local emulator on a loopback address.
	SASURL string

	// Client is a client the caller built. Its retry policy is overridden on
	// every lease call (see RequestTimeout).
	Client *azblob.Client

	// Container is the container that holds the lease blob. It is created if
	// missing. Azure's rules apply: 3-63 characters, lowercase letters,
	// digits and single hyphens, starting with a letter or digit.
	Container string

	// Blob is the name of the lease blob, created empty if missing. Every
	// group of instances that elects one leader shares one blob. A Blob or
	// Container that holds AccountKey=, SharedAccessSignature=, sig= or a
	// URL's query string is refused: a connection string or a SAS URL
	// given in the wrong field would show in every log line.
	Blob string

	// LeaseDuration is how long the lease outlives its holder's last
	// renewal: how long a crashed or cut-off leader blocks everyone.
	// Whole seconds from 15 s to 60 s take a native Azure lease, which the
	// server expires. Any other value from 3 s to 24 h takes an ETag lease
	// (see [ETagLease]): an infinite blob lease that the holder renews by
	// rewriting the blob's metadata, and that followers break once its
	// ETag has stood unchanged this long. Default 15 s: the shortest native
	// lease.
	LeaseDuration time.Duration

	// RenewInterval is how often the leader renews. Default LeaseDuration/3
	// (5 s), so two renewals can fail in a row before leadership is at
	// risk, or (LeaseDuration - StopMargin)/2 if that is less, and at most
	// 1 min (long ETag leases: a holder learns of a forced break, and an
	// operator sees it alive, within a minute). It must be
	// at least 500 ms (faster risks throttling) and at most
	// (LeaseDuration - StopMargin)/2, which leaves room for at least one
	// retry before the safety deadline of a renewal that failed fast (an
	// error answer, a reset; one that hangs on a silent server is another
	// matter: see RequestTimeout). After a
	// failed renewal the leader retries every RenewInterval/5 (at least
	// 100 ms) until it succeeds or the deadline passes.
	RenewInterval time.Duration

	// RetryInterval is how often a follower tries to acquire the lease.
	// Each wait is drawn uniformly from [3/4, 1] of it, so a fleet does not
	// move in lockstep and a released lease is taken within one interval.
	// Default 2 s; 100 ms to 1 min. After transient failures, followers back
	// off exponentially from it up to max(RetryInterval, LeaseDuration), or
	// 1 min for longer leases.
	RetryInterval time.Duration

	// StopMargin is how long before the lease could expire on the server
	// the leader's context is cancelled: the leader func must stop acting
	// within it. The lease could expire LeaseDuration after the last
	// successful renewal was sent, so the context is cancelled at
	// (send time of that renewal) + LeaseDuration - StopMargin, on the
	// monotonic clock. Default LeaseDuration/5 (3 s), at least 1 s and at
	// most 30 s (or LeaseDuration/100, if more). At least 1 s and
	// LeaseDuration/100, and at most LeaseDuration/2: the hundredth covers
	// the rate difference between two hosts' clocks over a long lease (NTP
	// normally keeps each within 0.05% of true, so two differ by at most
	// 0.1%: a tenth of the margin), and leaves nine tenths for the func.
	StopMargin time.Duration

	// RequestTimeout bounds every storage request, including the SDK's own
	// retries (which the library turns off: it retries on its own schedule).
	// A renewal is further bounded by the safety deadline. A ShardOwner's
	// claim of a free shard, which no safety waits on, bounds each of its
	// requests by three RequestTimeouts: a request cut short closes its
	// connection, and on a busy account the next one's first answer
	// waits. Default 4 s, or LeaseDuration - StopMargin - RenewInterval if
	// that is less (short ETag leases); at least 100 ms and at most
	// LeaseDuration - StopMargin - RenewInterval (7 s with the defaults),
	// so that a renewal stuck on a silent server gives up before the
	// safety deadline. At that maximum it gives up at the deadline itself,
	// with no time left to retry: one hung request costs the term. One a
	// retry delay (RenewInterval/5, at least 100 ms) or more below it leaves
	// time to send another renewal after one that hangs.
	//
	// It also bounds a shutdown, storage reachable or not. After the
	// caller's cancel, the leader func (every shard func) may wind down as
	// long as it needs, the lease still renewed; from the moment it has
	// returned (or from the cancel, for an instance that leads nothing)
	// RunTaskWhenMutexAcquired returns within RequestTimeout (4 s with the
	// defaults: the term's end mark and its release), and ShardOwner.Run
	// within 2 × RequestTimeout (8 s), whatever the number of shards: one
	// RequestTimeout for the shards' releases, sent in parallel, one for
	// the session's release and the deletion of its blob; plus scheduling
	// delays, milliseconds. A release not sent by then only leaves a lease
	// to expire, or a shard that the end of its session frees. Before that,
	// a ShardOwner that sees other sessions run its set hands its shards
	// straight on to them, its shard funcs running until each one's turn,
	// for RetryInterval + 2 × RequestTimeout (10 s) at most from the cancel.
	RequestTimeout time.Duration

	// ClientOptions are used when the library builds the client (every
	// source but Client): transport, telemetry, logging. Retry settings
	// are overridden. Without a Transport the library uses an HTTP
	// transport of its own (the Azure SDK's default settings, a connection
	// pool of its own, also used by the DefaultAzureCredential it builds),
	// whose idle connections RunTaskWhenMutexAcquired closes when it
	// returns (see [BlobLeaseManager.CloseIdleConnections]). A Transport
	// given here stays the caller's to close; a process running many
	// mutexes can share one between them, rather than keep a pool each.
	ClientOptions *azblob.ClientOptions
}

// String describes s without its secrets, so settings can be logged: a
// connection string is shown as REDACTED, and of a URL only the scheme, host
// and path, whichever field holds it (a SAS token put in ServiceURL by
// mistake, a user name and password in a URL, a connection string or a key
// put in Container or Blob).
func (s BlobSettings) String() string {
	return fmt.Sprintf("BlobSettings{%s Container:%s Blob:%s LeaseDuration:%v RenewInterval:%v RetryInterval:%v StopMargin:%v RequestTimeout:%v}",
		s.source(), shown(s.Container), shown(s.Blob), s.LeaseDuration, s.RenewInterval, s.RetryInterval, s.StopMargin, s.RequestTimeout)
}

// GoString is String, so that %#v does not print secrets either.
func (s BlobSettings) GoString() string { return s.String() }

// Format prints String (GoString for %#v) whatever the verb: without it,
// verbs that are not for strings (%d, %t) print the struct's fields raw,
// secrets included. The one exception is %p, which is for pointers: given a
// BlobSettings value, fmt prints its fields before consulting any method.
func (s BlobSettings) Format(f fmt.State, verb rune) { printRedacted(f, verb, s.String()) }

// printRedacted prints text, a description without secrets, for any verb.
func printRedacted(f fmt.State, verb rune, text string) {
	switch verb {
	case 's', 'q', 'x', 'X':
	default:
		verb = 's'
	}
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), text)
}

// LogValue lets log/slog print s without its secrets.
func (s BlobSettings) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText is String, so that encoders that would otherwise print every
// field (encoding/json, as structured loggers use) do not show secrets
// either. Settings are not meant to be read back from text.
func (s BlobSettings) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s BlobSettings) source() string {
	switch {
	case s.ConnectionString != "":
		return "ConnectionString:REDACTED"
	case s.SASURL != "":
		return "SASURL:" + printableURL(s.SASURL)
	case s.ServiceURL != "":
		return fmt.Sprintf("ServiceURL:%s Credential:%T", printableURL(s.ServiceURL), s.Credential)
	case s.Client != nil:
		return "Client:" + printableURL(s.Client.URL())
	}
	return "no source"
}

// printableURL shows where raw points without anything that may be secret
// in it: user info, query (a SAS token), fragment, and a path that looks like
// a token. A URL that does not parse, or names no host, may be a bare token:
// it is not shown at all.
func printableURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "REDACTED"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "REDACTED", false
	}
	if u.Fragment != "" || u.RawFragment != "" {
		u.Fragment, u.RawFragment = "REDACTED", ""
	}
	if p := strings.ToLower(u.EscapedPath()); strings.Contains(p, "sig=") || strings.Contains(p, "sig%3d") {
		u.Path, u.RawPath = "/REDACTED", ""
	}
	return u.String()
}

// shown quotes a name for an error or a log, or, if it may hold a secret,
// is REDACTED: the storage package's rule (blobstore.Shown), which its
// errors follow too.
func shown(name string) string { return blobstore.Shown(name) }

// unlessSecret is v, or REDACTED if it may hold a secret (see
// blobstore.UnlessSecret): for a value read from storage, which another
// writer may have put there.
func unlessSecret(v string) string { return blobstore.UnlessSecret(v) }

// carriesSecret reports whether a name looks like a connection string with
// a key or a SAS, a SAS token, or a URL with a query string (a SAS URL): a
// value for ConnectionString or SASURL given as a container or a blob name.
// Such a name is refused, not used: it would appear in every log line and
// error that names the blob. See blobstore.CarriesSecret.
func carriesSecret(name string) bool { return blobstore.CarriesSecret(name) }

// errCarriesSecret is the error for a name that carriesSecret, which it
// does not show.
func errCarriesSecret(field string) error {
	return &SettingsError{Field: field, Rule: "looks like a connection string or a SAS URL, not a " + strings.ToLower(field) + " name " + secretUnshown}
}

// secretUnshown ends the error for a value that carriesSecret.
const secretUnshown = "(it holds AccountKey=, SharedAccessSignature=, sig= or a URL's query string); the value is not shown, as it may be secret"

// SettingsError reports an invalid [BlobSettings] field.
type SettingsError struct {
	Field string // the BlobSettings field, e.g. "RenewInterval"
	Rule  string // what the field must satisfy, with the offending value where it is not a secret
}

func (e *SettingsError) Error() string {
	return fmt.Sprintf("leaderelection: invalid BlobSettings.%s: %s", e.Field, e.Rule)
}

// retryDelay is how soon a leader tries again after a renewal, a term
// record or a release failed: RenewInterval/5, at least 100 ms.
func (s BlobSettings) retryDelay() time.Duration {
	return max(s.RenewInterval/5, 100*time.Millisecond)
}

// withDefaults returns s with every zero timing replaced by its default.
func (s BlobSettings) withDefaults() BlobSettings {
	if s.LeaseDuration == 0 {
		s.LeaseDuration = DefaultLeaseDuration
	}
	if s.StopMargin == 0 {
		least := minStopMargin(s.LeaseDuration)
		s.StopMargin = min(max(s.LeaseDuration/5, least), max(maxDefaultStopMargin, least))
	}
	if s.RenewInterval == 0 {
		s.RenewInterval = min(s.LeaseDuration/3, (s.LeaseDuration-s.StopMargin)/2, maxDefaultRenewInterval)
	}
	if s.RetryInterval == 0 {
		s.RetryInterval = DefaultRetryInterval
	}
	if s.RequestTimeout == 0 {
		s.RequestTimeout = DefaultRequestTimeout
		// A short ETag lease leaves less room than that; settings whose
		// room is too small are reported for the fields that took it.
		if room := s.LeaseDuration - s.StopMargin - s.RenewInterval; room >= minRequestTimeout {
			s.RequestTimeout = min(s.RequestTimeout, room)
		}
	}
	return s
}

// Caps on the defaults that scale with the lease: they matter only for long
// ETag leases, where a fifth or a third of the lease would be minutes or
// hours.
const (
	maxDefaultStopMargin    = 30 * time.Second
	maxDefaultRenewInterval = time.Minute
)

// minStopMargin is the smallest StopMargin for a lease of d: MinStopMargin,
// or d/100 if more. NTP normally keeps a clock's rate within 500 ppm of
// true, so the holder's and a follower's clocks (or the server's) may
// disagree by up to d/1000 over a lease: a hundredth leaves nine tenths of
// the margin for the leader func to stop.
func minStopMargin(d time.Duration) time.Duration {
	return max(MinStopMargin, d/100)
}

// Validate reports every invalid field of s, once each, as [*SettingsError]
// values joined with [errors.Join]. Defaults are applied first, but a
// default derived from an invalid field is not reported: the field is. It
// makes no network call.
func (s BlobSettings) Validate() error { return s.validate(false) }

// validate is Validate for a lease that is always an ETag lease if etagOnly
// (a ShardOwner's sessions): any LeaseDuration from 3 s to 24 h then, even
// one that would otherwise take a native lease and so must be whole seconds.
func (s BlobSettings) validate(etagOnly bool) error {
	given := s
	s = s.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &SettingsError{Field: field, Rule: fmt.Sprintf(format, args...)})
	}

	var sources []string
	for _, src := range []struct {
		name string
		set  bool
	}{
		{"ConnectionString", s.ConnectionString != ""},
		{"ServiceURL", s.ServiceURL != ""},
		{"SASURL", s.SASURL != ""},
		{"Client", s.Client != nil},
	} {
		if src.set {
			sources = append(sources, src.name)
		}
	}
	switch len(sources) {
	case 0:
		bad("ConnectionString", "no storage account given: set one of ConnectionString, ServiceURL, SASURL or Client")
	case 1:
	default:
		bad(sources[1], "set only one of ConnectionString, ServiceURL, SASURL or Client (found %s)", strings.Join(sources, " and "))
	}
	if s.Credential != nil && s.ServiceURL == "" {
		bad("Credential", "is only used with ServiceURL")
	}
	if s.ClientOptions != nil && s.Client != nil {
		bad("ClientOptions", "is not used with Client: configure the client you built instead")
	}
	if s.ConnectionString != "" {
		if err := blobstore.CheckConnectionString(s.ConnectionString); err != nil {
			errs = append(errs, settingsError(err))
		}
	}
	if s.ServiceURL != "" {
		if err := blobstore.CheckServiceURL(s.ServiceURL); err != nil {
			errs = append(errs, settingsError(err))
		}
	}
	if s.SASURL != "" {
		if err := blobstore.CheckSASURL(s.SASURL, s.Container); err != nil {
			errs = append(errs, settingsError(err))
		}
	}

	if err := checkContainerName(s.Container); err != nil {
		errs = append(errs, err)
	}
	if err := checkBlobName(s.Blob); err != nil {
		errs = append(errs, err)
	}

	errs = append(errs, s.timingErrors(given, etagOnly)...)
	return errors.Join(errs...)
}

// timingErrors reports the invalid timings of s (defaults applied) for a
// user who set those of given. It reports causes: a field the user left
// zero takes a default derived from the others, so an invalid default
// (LeaseDuration/3 of a 15 ns lease) means that a field it derives from is
// invalid, and that field is reported instead. Likewise a relation between
// two fields (RenewInterval at most (LeaseDuration - StopMargin)/2) is
// checked only once both are valid on their own terms: otherwise the bound
// it would print is nonsense (a negative RequestTimeout limit) and the one
// mistake would be reported twice.
func (s BlobSettings) timingErrors(given BlobSettings, etagOnly bool) []error {
	var errs, fromDefaults []error
	bad := func(field string, set bool, format string, args ...any) {
		err := &SettingsError{Field: field, Rule: fmt.Sprintf(format, args...)}
		if set {
			errs = append(errs, err)
		} else {
			err.Rule += " (its default, derived from the other timings)"
			fromDefaults = append(fromDefaults, err)
		}
	}

	L, R, M, T := s.LeaseDuration, s.RenewInterval, s.StopMargin, s.RequestTimeout
	leaseSet, renewSet, marginSet, timeoutSet := given.LeaseDuration != 0, given.RenewInterval != 0, given.StopMargin != 0, given.RequestTimeout != 0
	leaseOK := true
	switch {
	case !etagOnly && L >= minLeaseDuration && L <= maxLeaseDuration && L%time.Second != 0:
		bad("LeaseDuration", leaseSet, "must be a whole number of seconds from 15s to 60s (a native Azure lease), got %v", L)
		leaseOK = false
	case etagOnly && (L < minETagLeaseDuration || L > maxETagLeaseDuration):
		bad("LeaseDuration", leaseSet, "must be from %v to %v (a ShardOwner's session lease is always an ETag lease), got %v",
			minETagLeaseDuration, maxETagLeaseDuration, L)
		leaseOK = false
	case L < minETagLeaseDuration || L > maxETagLeaseDuration:
		bad("LeaseDuration", leaseSet, "must be from %v to %v (whole seconds from 15s to 60s take a native Azure lease, other values an ETag lease), got %v",
			minETagLeaseDuration, maxETagLeaseDuration, L)
		leaseOK = false
	}
	marginOK := true
	switch {
	case M < MinStopMargin:
		bad("StopMargin", marginSet, "must be at least %v, got %v", MinStopMargin, M)
		marginOK = false
	case !leaseOK:
	case M < minStopMargin(L):
		bad("StopMargin", marginSet, "must be at least LeaseDuration/100 = %v (two hosts' clocks may run 0.1%% apart over the lease), got %v", minStopMargin(L), M)
		marginOK = false
	case M > L/2:
		bad("StopMargin", marginSet, "must be at most LeaseDuration/2 = %v, got %v", L/2, M)
		marginOK = false
	}
	renewOK := true
	switch {
	case R < minRenewInterval:
		bad("RenewInterval", renewSet, "must be at least %v (renewing faster only invites throttling), got %v", minRenewInterval, R)
		renewOK = false
	case !leaseOK || !marginOK:
	case R > (L-M)/2:
		bad("RenewInterval", renewSet, "must be at most (LeaseDuration - StopMargin)/2 = %v so a failed renewal can be retried before the safety deadline, got %v", (L-M)/2, R)
		renewOK = false
	}
	if s.RetryInterval < minRetryInterval || s.RetryInterval > maxRetryInterval {
		bad("RetryInterval", given.RetryInterval != 0, "must be from %v to %v, got %v", minRetryInterval, maxRetryInterval, s.RetryInterval)
	}
	switch {
	case T < minRequestTimeout:
		bad("RequestTimeout", timeoutSet, "must be at least %v, got %v", minRequestTimeout, T)
	case !leaseOK || !marginOK || !renewOK:
	case T > L-M-R:
		// A renewal sent at RenewInterval that hangs on a silent server
		// must give up by the safety deadline, not hold the term to it.
		bad("RequestTimeout", timeoutSet, "must be at most LeaseDuration - StopMargin - RenewInterval = %v, so that a renewal stuck on a silent server gives up before the safety deadline, got %v", L-M-R, T)
	}
	if len(errs) == 0 {
		// Valid given timings always yield valid defaults (see the
		// tests); should that ever fail, say so rather than pass.
		return fromDefaults
	}
	return errs
}

// checkContainerName applies Azure's container naming rules.
func checkContainerName(name string) error {
	bad := func(rule string) error {
		return &SettingsError{Field: "Container", Rule: fmt.Sprintf("%s, got %s", rule, shown(name))}
	}
	switch {
	case name == "":
		return &SettingsError{Field: "Container", Rule: "is required"}
	case carriesSecret(name):
		return errCarriesSecret("Container")
	case name == "$root":
		return nil
	case len(name) < 3 || len(name) > 63:
		return bad("must be 3 to 63 characters long")
	case name[0] == '-' || name[len(name)-1] == '-':
		return bad("must start and end with a letter or digit")
	case strings.Contains(name, "--"):
		return bad("must not contain consecutive hyphens")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return bad("may contain only lowercase letters, digits and hyphens")
		}
	}
	return nil
}

// checkBlobName applies Azure's blob naming rules that can be checked locally.
func checkBlobName(name string) error {
	bad := func(rule string) error {
		return &SettingsError{Field: "Blob", Rule: fmt.Sprintf("%s, got %s", rule, shown(name))}
	}
	switch {
	case name == "":
		return &SettingsError{Field: "Blob", Rule: "is required"}
	case carriesSecret(name):
		return errCarriesSecret("Blob")
	case len(name) > 1024:
		return bad("must be at most 1024 characters long")
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, "/"):
		return bad("must not end with a dot or a slash")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad("must not contain control characters")
		}
	}
	return nil
}

// storeClient builds the storage package's client for s's container (s must
// have passed Validate, and have its defaults applied): every request bounded
// by RequestTimeout unless it sets its own, and sent without the SDK's
// retries. maxIdle is how many idle connections to the account the
// library's own transport keeps, if it builds one (0: the SDK's 10).
func (s BlobSettings) storeClient(maxIdle int) (*blobstore.Client, error) {
	cl, err := blobstore.New(blobstore.Config{
		ConnectionString:    s.ConnectionString,
		ServiceURL:          s.ServiceURL,
		Credential:          s.Credential,
		SASURL:              s.SASURL,
		Client:              s.Client,
		ClientOptions:       s.ClientOptions,
		Container:           s.Container,
		RequestTimeout:      s.RequestTimeout,
		MaxIdleConnsPerHost: maxIdle,
	})
	if err != nil {
		return nil, settingsError(err)
	}
	return cl, nil
}

// settingsError is err, from the storage package's checks of a source or its
// building of a client, with a *blobstore.ConfigError made the
// *SettingsError it reads as, word for word. Any other error is returned as
// it is.
func settingsError(err error) error {
	var ce *blobstore.ConfigError
	if errors.As(err, &ce) {
		return &SettingsError{Field: ce.Field, Rule: ce.Rule}
	}
	return err
}

// ETag leases may be this short or this long. Below 3 s the relations
// between the timings leave no room (StopMargin at least 1 s, two renewals
// of at least 500 ms before the deadline, a request timeout); above a day,
// a crashed leader would block everyone for longer than anyone means to.
// A record is read by the same bounds (wire.MinDeclarable, MaxDeclarable).
const (
	minETagLeaseDuration = wire.MinDeclarable // 3 s
	maxETagLeaseDuration = wire.MaxDeclarable // 24 h
)

// checkOwnName refuses a blob name (a mutex's, or a ShardOwner's prefix)
// that could be one of a ShardOwner's blobs: P/sessions/ID or P/shards/NAME
// for another owner's prefix P. The blobs' roles keep the kinds out of each
// other's way where the names cannot be seen together (see record.go); here a
// clash is refused before it is made. The segments checked are those after
// the first (a prefix is never empty), and for a mutex before the last (its
// own name).
func checkOwnName(name string, prefix bool) error {
	segs := strings.Split(name, "/")
	end := len(segs) - 1
	if prefix {
		end = len(segs)
	}
	for i := 1; i < end; i++ {
		if d := segs[i] + "/"; d == wire.SessionsDir || d == wire.ShardsDir || d == wire.HandoffDir || d == wire.HeldDir {
			owner := strings.Join(segs[:i], "/")
			what := "a mutex's blob"
			if prefix {
				what = "a ShardOwner's prefix"
			}
			if carriesSecret(name) {
				return errCarriesSecret("Blob")
			}
			return &SettingsError{Field: "Blob", Rule: fmt.Sprintf("is %s that lies among the blobs of a ShardOwner with prefix %s (its %q directory): choose a name without a %q segment, got %s",
				what, shown(owner), d, segs[i], shown(name))}
		}
	}
	return nil
}
