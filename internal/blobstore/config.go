package blobstore

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Config says which container to reach and how: everything building a
// [Client] needs. Its source fields mirror the root's BlobSettings, whose
// validation (one source, names, timings) stays in the root; New uses the
// first source set, in the order Client, ConnectionString, SASURL,
// ServiceURL.
type Config struct {
	// ConnectionString is a storage account connection string: with
	// AccountName and AccountKey, or with SharedAccessSignature and
	// BlobEndpoint, or "UseDevelopmentStorage=true" (with
	// DevelopmentStorageProxyUri, if any) for Azurite on port 10000. See
	// [CheckConnectionString] for the forms refused.
	ConnectionString string

	// ServiceURL is the account's blob endpoint, used with Credential,
	// e.g. "https://myaccount.blob.core.windows.net/".
	ServiceURL string

	// Credential authenticates requests to ServiceURL. Nil means
	// azidentity.DefaultAzureCredential, built over the client's transport
	// so that its connections are closed with the storage requests'.
	// Either way a failure to get a token names the credential.
	Credential azcore.TokenCredential

	// SASURL is the account's or the container's blob URL with a SAS token.
	SASURL string

	// Client is a client the caller built: its container client is used
	// as it is (its transport, its pool), and only its retries are
	// overridden, per call. Nothing is redacted from its errors but URLs'
	// query strings: the package does not know its secrets.
	Client *azblob.Client

	// ClientOptions are used when the package builds the client (every
	// source but Client): transport, telemetry, logging. Retry settings
	// are overridden per call. Without a Transport the package uses an
	// HTTP transport of its own (see [Client.CloseIdleConnections]), also
	// used by the DefaultAzureCredential it builds.
	ClientOptions *azblob.ClientOptions

	// Container is the container's name. It is not checked here: Azure's
	// naming rules are the root's to apply.
	Container string

	// RequestTimeout bounds every request whose [Call] sets no timeout of
	// its own, the SDK's retries being off. Default 4 s (the root's
	// DefaultRequestTimeout).
	RequestTimeout time.Duration

	// MaxIdleConnsPerHost is how many idle connections to the account the
	// package's own transport keeps (a caller's transport is the caller's
	// to size). Default 10, the SDK's: enough for a mutex; a ShardOwner,
	// whose claims, releases, handovers and listings run at once, keeps
	// more rather than open new ones, which on a busy account wait for
	// their first answer.
	MaxIdleConnsPerHost int
}

// defaultRequestTimeout is Config.RequestTimeout's default.
const defaultRequestTimeout = 4 * time.Second

// ConfigError reports a configuration that cannot reach storage. Its text
// is the root's SettingsError's, word for word, and its fields are the
// same: the root converts one into the other.
type ConfigError struct {
	Field string // the BlobSettings field the value came from, e.g. "ConnectionString"
	Rule  string // what the field must satisfy, with the offending value where it is not a secret
}

// Error reads "leaderelection: invalid BlobSettings.<Field>: <Rule>".
func (e *ConfigError) Error() string {
	return fmt.Sprintf("leaderelection: invalid BlobSettings.%s: %s", e.Field, e.Rule)
}

// New builds the client for cfg's container. It makes no network call. Its
// errors are a [*ConfigError] for a source that does not parse, or the
// SDK's refusal to build a client, with secrets removed.
func New(cfg Config) (*Client, error) {
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = defaultRequestTimeout
	}
	c := &Client{container: cfg.Container, timeout: timeout}
	if cfg.Client != nil {
		c.cc = cfg.Client.ServiceClient().NewContainerClient(cfg.Container)
		return c, nil
	}
	var opts container.ClientOptions
	if cfg.ClientOptions != nil {
		opts = container.ClientOptions(*cfg.ClientOptions) // a copy: the same type underneath
	}
	if opts.Transport == nil {
		c.transport = newTransport()
		if cfg.MaxIdleConnsPerHost > 0 {
			c.transport.MaxIdleConnsPerHost = cfg.MaxIdleConnsPerHost
		}
		opts.Transport = &http.Client{Transport: c.transport}
	}
	cc, red, err := cfg.buildContainerClient(&opts)
	if err != nil {
		return nil, err
	}
	c.cc, c.red = cc, red
	return c, nil
}

func (cfg Config) buildContainerClient(opts *container.ClientOptions) (*container.Client, redactor, error) {
	switch {
	case cfg.ConnectionString != "":
		c, err := parseConnectionString(cfg.ConnectionString)
		if err != nil {
			return nil, redactor{}, err
		}
		red := redactor{secrets: []string{c.accountKey, c.sas}}
		containerURL := c.serviceURL + url.PathEscape(cfg.Container)
		if c.accountKey != "" {
			cred, err := container.NewSharedKeyCredential(c.accountName, c.accountKey)
			if err != nil {
				// The SDK's message is about base64 decoding; it does not echo the key.
				return nil, red, &ConfigError{Field: "ConnectionString", Rule: "AccountKey is not valid base64: " + red.redact(err.Error())}
			}
			cc, err := container.NewClientWithSharedKeyCredential(containerURL, cred, opts)
			if err != nil {
				return nil, red, fmt.Errorf("leaderelection: building the container client: %s", red.redact(err.Error()))
			}
			return cc, red, nil
		}
		cc, err := container.NewClientWithNoCredential(containerURL+"?"+c.sas, opts)
		if err != nil {
			return nil, red, fmt.Errorf("leaderelection: building the container client: %s", red.redact(err.Error()))
		}
		return cc, red, nil
	case cfg.SASURL != "":
		containerURL, err := sasContainerURL(cfg.SASURL, cfg.Container)
		if err != nil {
			return nil, redactor{}, err
		}
		red := redactor{}
		if u, err := url.Parse(cfg.SASURL); err == nil {
			red.secrets = append(red.secrets, u.RawQuery, u.Query().Get("sig"))
		}
		cc, err := container.NewClientWithNoCredential(containerURL, opts)
		if err != nil {
			return nil, red, fmt.Errorf("leaderelection: building the container client: %s", red.redact(err.Error()))
		}
		return cc, red, nil
	case cfg.ServiceURL != "":
		var cred azcore.TokenCredential = namedCredential{name: fmt.Sprintf("%T", cfg.Credential), cred: cfg.Credential}
		if cfg.Credential == nil {
			// Over the same transport as the storage requests, so that its
			// connections are closed with theirs.
			dac, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
				ClientOptions: azcore.ClientOptions{Transport: opts.Transport},
			})
			if err != nil {
				return nil, redactor{}, fmt.Errorf("leaderelection: Credential is nil and DefaultAzureCredential could not be built: %w", err)
			}
			cred = namedCredential{name: "DefaultAzureCredential", cred: dac}
		}
		cc, err := container.NewClient(strings.TrimRight(cfg.ServiceURL, "/")+"/"+url.PathEscape(cfg.Container), cred, opts)
		if err != nil {
			return nil, redactor{}, fmt.Errorf("leaderelection: building the container client: %w", err)
		}
		return cc, redactor{}, nil
	}
	return nil, redactor{}, &ConfigError{Field: "ConnectionString", Rule: "no storage account given: set one of ConnectionString, ServiceURL, SASURL or Client"}
}

// namedCredential makes a token credential's failures say which credential
// failed: a bare "no token" is no help to whoever reads the log.
type namedCredential struct {
	name string // the credential's type, e.g. "*azidentity.ManagedIdentityCredential"
	cred azcore.TokenCredential
}

func (c namedCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.cred.GetToken(ctx, opts)
	if err != nil {
		return tok, &credentialError{name: c.name, err: err}
	}
	return tok, nil
}

// credentialError is a credential's failure to get a token; the classifier
// names the credential.
type credentialError struct {
	name string
	err  error
}

func (e *credentialError) Error() string { return e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// CheckServiceURL reports whether raw can be a ServiceURL: an absolute https
// URL of the account's endpoint, without query, fragment or user info, and
// with a path only where the host cannot name the account (then the path is
// the account). The error is a [*ConfigError] for the field ServiceURL.
func CheckServiceURL(raw string) error {
	u, err := url.Parse(raw)
	path := ""
	if err == nil {
		path = strings.Trim(u.Path, "/")
	}
	switch {
	case err != nil || u.Host == "":
		return &ConfigError{Field: "ServiceURL", Rule: "must be an absolute URL such as https://myaccount.blob.core.windows.net/"}
	case u.RawQuery != "" || u.Fragment != "":
		return &ConfigError{Field: "ServiceURL", Rule: "must not carry a query string or fragment; put a SAS URL in SASURL"}
	case u.User != nil:
		return &ConfigError{Field: "ServiceURL", Rule: "must not carry a user name or password: the Credential authenticates"}
	case u.Scheme != "https":
		return &ConfigError{Field: "ServiceURL", Rule: fmt.Sprintf("must use https (token credentials are never sent in clear), got %q", u.Scheme)}
	case path == "":
	case !pathStyleHost(u.Host):
		return &ConfigError{Field: "ServiceURL", Rule: fmt.Sprintf("must be the account's endpoint, without a path (put the container in Container), got path %s", Shown(u.Path))}
	case !accountNamePattern.MatchString(path):
		return &ConfigError{Field: "ServiceURL", Rule: fmt.Sprintf("must be the account's endpoint: with a host that does not name the account, exactly one path segment, the account name "+
			"(3 to 24 lowercase letters and digits), as in https://127.0.0.1:10000/devstoreaccount1 (put the container in Container), got path %s", Shown(u.Path))}
	}
	return nil
}

// accountNamePattern is Azure's rule for storage account names.
var accountNamePattern = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

// pathStyleHost reports whether host (with or without a port) cannot carry
// the account name, so that an endpoint on it names the account in its first
// path segment: an IP address (Azure's IP-style endpoints), or a name without
// dots such as localhost or a docker-compose service (the emulator, which
// reads the account from the path for these hosts and host.docker.internal).
func pathStyleHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	return net.ParseIP(host) != nil || !strings.Contains(host, ".") || strings.EqualFold(host, "host.docker.internal")
}

// CheckSASURL reports whether raw can be a SASURL for the container
// containerName: an account's or that container's URL with a SAS token,
// over https but for a loopback emulator. The error is a [*ConfigError] for
// the field SASURL, and never includes the URL: it holds the token.
func CheckSASURL(raw, containerName string) error {
	_, err := sasContainerURL(raw, containerName)
	return err
}

// sasContainerURL turns an account or container SAS URL into the container's
// SAS URL. Its errors never include the URL: it holds the token.
func sasContainerURL(raw, containerName string) (string, error) {
	parts, err := azblob.ParseURL(raw)
	if err != nil || parts.Host == "" || (parts.Scheme != "https" && parts.Scheme != "http") {
		return "", &ConfigError{Field: "SASURL", Rule: "must be an absolute http(s) URL of the account or the container, with a SAS token"}
	}
	if parts.SAS.Signature() == "" {
		return "", &ConfigError{Field: "SASURL", Rule: "has no SAS token (no sig= parameter)"}
	}
	// The SDK reads the account from the path only for IP addresses; the
	// emulator also does for host names without dots (localhost, a
	// docker-compose service).
	account := ""
	if parts.IPEndpointStyleInfo.AccountName == "" && pathStyleHost(parts.Host) {
		account = parts.ContainerName
		parts.ContainerName, parts.BlobName, _ = strings.Cut(parts.BlobName, "/")
	}
	if parts.Scheme != "https" && !isLoopback(parts.Host) {
		return "", &ConfigError{Field: "SASURL", Rule: "must use https: a SAS token is a secret (plain http is accepted only for a local emulator on a loopback address)"}
	}
	if parts.BlobName != "" {
		return "", &ConfigError{Field: "SASURL", Rule: "must name the account or the container, not a blob (the library writes the blob's metadata and may create it)"}
	}
	if parts.ContainerName != "" && parts.ContainerName != containerName {
		return "", &ConfigError{Field: "SASURL", Rule: fmt.Sprintf("names container %s but Container is %s", Shown(parts.ContainerName), Shown(containerName))}
	}
	parts.ContainerName = containerName
	out := parts.String()
	if account != "" {
		origin := parts.Scheme + "://" + parts.Host
		out = origin + "/" + account + strings.TrimPrefix(out, origin)
	}
	return out, nil
}

// isLoopback reports whether host (with or without a port) is a loopback
// address or localhost: a local emulator.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Azurite's well-known development account, published in its documentation.
const (
	devAccountName = "devstoreaccount1"
	devAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

type connectionString struct {
	serviceURL  string // with a trailing slash
	accountName string
	accountKey  string
	sas         string
}

// CheckConnectionString reports whether cs is a connection string the
// package can build a client from; the error is a [*ConfigError] for the
// field ConnectionString, and never includes the string's values. It
// refuses a key Azure's connection strings do not have (named, with the key
// it likely misspells), UseDevelopmentStorage with any value but true or
// UseDevelopmentStorage=true with any key but
// DevelopmentStorageProxyUri, a string with neither AccountName nor
// BlobEndpoint, or with neither AccountKey nor SharedAccessSignature, and
// plain http where a secret would cross a network in clear (anywhere but a
// loopback address, or, with a key, the emulator's published development
// account).
func CheckConnectionString(cs string) error {
	_, err := parseConnectionString(cs)
	return err
}

// connectionStringKeys are the keys Azure's connection strings carry (the
// portal's, the emulator's, and .NET's parser's): the blob service's are
// read, the other services' endpoints accepted and ignored. Any other key
// is refused, named: a misspelt AccountName would otherwise be reported as
// missing, and the misspelling never shown.
var connectionStringKeys = []string{
	"DefaultEndpointsProtocol", "AccountName", "AccountKey", "EndpointSuffix", "SharedAccessSignature",
	"BlobEndpoint", "QueueEndpoint", "TableEndpoint", "FileEndpoint",
	"BlobSecondaryEndpoint", "QueueSecondaryEndpoint", "TableSecondaryEndpoint", "FileSecondaryEndpoint",
	"UseDevelopmentStorage", "DevelopmentStorageProxyUri",
}

// parseConnectionString reads the fields the blob service needs. The SDK's
// parser does not know UseDevelopmentStorage, and its errors cannot name the
// missing key. Errors never include the string's values. An unknown key is
// reported with what else is wrong, in one error.
func parseConnectionString(cs string) (connectionString, error) {
	kv := map[string]string{}
	var keys, unknown []string // as spelt, in order: for messages
	for _, part := range strings.Split(strings.TrimSpace(cs), ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return connectionString{}, &ConfigError{Field: "ConnectionString", Rule: "is malformed: expected Key=Value pairs separated by semicolons"}
		}
		k = strings.TrimSpace(k)
		kv[strings.ToLower(k)] = strings.TrimSpace(v)
		keys = append(keys, keyShown(k))
		if !slices.ContainsFunc(connectionStringKeys, func(known string) bool { return strings.EqualFold(known, k) }) {
			unknown = append(unknown, k)
		}
	}
	c, rule := readConnectionString(kv, keys)
	if len(unknown) > 0 {
		rule = joinRules(unknownKeysRule(unknown), rule)
	}
	if rule != "" {
		return connectionString{}, &ConfigError{Field: "ConnectionString", Rule: rule}
	}
	return c, nil
}

// joinRules joins what is wrong with one field into one rule.
func joinRules(rules ...string) string {
	return strings.Join(slices.DeleteFunc(rules, func(r string) bool { return r == "" }), "; ")
}

// unknownKeysRule names the unknown keys, each with the known key it is
// likely a misspelling of.
func unknownKeysRule(unknown []string) string {
	var named []string
	guessed := false
	for _, k := range unknown {
		shown := keyShown(k)
		if near := nearestKey(k); near != "" && shown == k {
			shown += " (did you mean " + near + "?)"
			guessed = true
		}
		named = append(named, shown)
	}
	rule := "has an unknown key " + strings.Join(named, ", ")
	if len(unknown) > 1 {
		rule = "has unknown keys " + strings.Join(named, ", ")
	}
	if !guessed {
		rule += " (the keys are " + strings.Join(connectionStringKeys, ", ") + ")"
	}
	return rule
}

// keyShown is a key as an error may show it: a key name is letters and
// digits; anything else (a value pasted where a key goes, an account key
// whose padding took the place of the "=") may be a secret and is not shown.
func keyShown(k string) string {
	if keyName.MatchString(k) {
		return k
	}
	return "<a key not shown: it is not a key name and may be a secret>"
}

var keyName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,39}$`)

// nearestKey is the known key k is within two edits of (letter case
// aside), or "".
func nearestKey(k string) string {
	for _, known := range connectionStringKeys {
		if editDistance(strings.ToLower(k), strings.ToLower(known)) <= 2 {
			return known
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// readConnectionString reads the blob service's fields from kv (keys
// lower-cased; keys holds them as spelt, for messages), or says what is
// wrong.
func readConnectionString(kv map[string]string, keys []string) (connectionString, string) {
	var c connectionString
	if dev, ok := kv["usedevelopmentstorage"]; ok && !strings.EqualFold(dev, "true") {
		return c, fmt.Sprintf("UseDevelopmentStorage must be true (the only value it takes), got %s", Shown(dev))
	}
	if _, ok := kv["usedevelopmentstorage"]; ok {
		// Refused rather than guessed at: the development storage shortcut
		// names its endpoint itself, so another endpoint, account or key
		// beside it was either ignored (the user's Azurite on another port
		// silently not used) or would make a hybrid that is neither. Azure's
		// .NET parser refuses these combinations too ("No valid combination
		// of account information found"); the message says what to write.
		var extra []string
		for _, k := range keys {
			if !strings.EqualFold(k, "UseDevelopmentStorage") && !strings.EqualFold(k, "DevelopmentStorageProxyUri") {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 {
			return c, fmt.Sprintf("UseDevelopmentStorage=true names Azurite's endpoint (127.0.0.1:10000), account and key itself: it takes no other key "+
				"but DevelopmentStorageProxyUri, found %s. For an emulator elsewhere, give the development account and the endpoint: "+
				"AccountName=%s;AccountKey=<its published key>;BlobEndpoint=http://<host>:<port>/%s", strings.Join(extra, ", "), devAccountName, devAccountName)
		}
		base := "http://127.0.0.1"
		if proxy := kv["developmentstorageproxyuri"]; proxy != "" {
			base = strings.TrimRight(proxy, "/")
		}
		c = connectionString{serviceURL: base + ":10000/" + devAccountName + "/", accountName: devAccountName, accountKey: devAccountKey}
		return c, ""
	}
	c.accountName, c.accountKey, c.sas = kv["accountname"], kv["accountkey"], strings.TrimPrefix(kv["sharedaccesssignature"], "?")
	switch endpoint := kv["blobendpoint"]; {
	case endpoint != "":
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return c, "BlobEndpoint must be an absolute http(s) URL"
		}
		c.serviceURL = strings.TrimRight(endpoint, "/") + "/"
	case c.accountName != "":
		protocol, suffix := kv["defaultendpointsprotocol"], kv["endpointsuffix"]
		if protocol == "" {
			protocol = "https"
		}
		if suffix == "" {
			suffix = "core.windows.net"
		}
		if protocol = strings.ToLower(protocol); protocol != "https" && protocol != "http" {
			return c, "DefaultEndpointsProtocol must be https or http"
		}
		c.serviceURL = fmt.Sprintf("%s://%s.blob.%s/", protocol, c.accountName, suffix)
	default:
		return c, "needs AccountName or BlobEndpoint (or UseDevelopmentStorage=true)"
	}
	switch {
	case c.accountKey != "" && c.accountName == "":
		return c, "has AccountKey but no AccountName"
	case c.accountKey == "" && c.sas == "":
		return c, "needs AccountKey (with AccountName) or SharedAccessSignature"
	}
	// Plain http only where no secret crosses a network in clear: to a
	// loopback address, or with the emulator's development account, whose
	// key is published (Azurite as http://azurite:10000 in docker compose).
	// A request signed with a key carries no key, but whoever reads it can
	// replay it and read what it reads.
	if u, err := url.Parse(c.serviceURL); err == nil && u.Scheme != "https" && !isLoopback(u.Host) {
		switch {
		case c.sas != "":
			return c, "must use https: a SAS token is a secret (plain http is accepted only for a local emulator on a loopback address)"
		case c.accountKey != "" && (c.accountName != devAccountName || c.accountKey != devAccountKey):
			return c, "must use https with an account key (plain http is accepted only for an emulator: on a loopback address, or with the emulator's development account, whose key is public)"
		}
	}
	return c, ""
}
