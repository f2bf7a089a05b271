package blobstore

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// queryPattern matches the query string of a URL: SAS tokens live there.
var queryPattern = regexp.MustCompile(`(https?://[^\s?"'#]*)\?[^\s"'#]*`)

// redactor removes secrets from text that may reach an error or a log: the
// query string of any URL in it (a SAS token), and the secrets the client
// was built with (an account key, a SAS token given bare in a connection
// string, a SAS URL's signature).
type redactor struct{ secrets []string }

func (r redactor) redact(s string) string {
	s = queryPattern.ReplaceAllString(s, "$1?REDACTED")
	for _, secret := range r.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "REDACTED")
		}
	}
	return s
}

// scrub returns what an *Error unwraps to when no HTTP response came: err
// without the *url.Error around it, whose message holds the request URL and
// so a SAS token. What is left (a *net.OpError, context.DeadlineExceeded, a
// TLS error) still matches errors.Is and errors.As, unless its own text
// carries a secret: then only that text is kept, redacted.
func (r redactor) scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if msg := err.Error(); r.redact(msg) != msg {
		return errors.New(r.redact(msg))
	}
	return err
}

// Shown quotes a name for an error or a log, or, if it may hold a secret
// (see [UnlessSecret]), is REDACTED: a rejected name is often a value meant
// for another field, pasted in the wrong place.
func Shown(name string) string {
	if v := UnlessSecret(name); v != name {
		return v
	}
	return strconv.Quote(name)
}

// UnlessSecret is v, or REDACTED if it may hold a secret: if it
// [CarriesSecret], or holds a bare account key or signature (a long run of
// base64 with its padding). It is for a value read from storage, which
// another writer may have put there, as much as for one configured.
func UnlessSecret(v string) string {
	if CarriesSecret(v) || base64Key.MatchString(v) {
		return "REDACTED"
	}
	return v
}

// base64Key matches an account key (88 characters, ending "==") or a
// signature (44, ending "="), bare.
var base64Key = regexp.MustCompile(`[A-Za-z0-9+/]{40,}={1,2}`)

// CarriesSecret reports whether a name looks like a connection string with
// a key or a SAS, a SAS token, or a URL with a query string (a SAS URL): a
// value for ConnectionString or SASURL given as a container or a blob name.
// Such a name is refused, not used: it would appear in every log line and
// error that names the blob.
func CarriesSecret(name string) bool {
	l := strings.ToLower(name)
	for _, mark := range []string{"accountkey=", "sharedaccesssignature=", "sig=", "sig%3d"} {
		if strings.Contains(l, mark) {
			return true
		}
	}
	i := strings.Index(l, "://")
	return i >= 0 && strings.Contains(l[i:], "?")
}
