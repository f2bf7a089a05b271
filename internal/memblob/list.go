package memblob

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// list serves List Blobs, flat (GET ?restype=container&comp=list): the
// container's blobs in name order, from just after marker (exclusive, as
// Azurite's marker is the last name of the previous page) and from
// startFrom (inclusive), whose names start with prefix, at most maxresults
// of them, with NextMarker set when more remain.
//
// Azurite divergence: Azure's NextMarker is an opaque token; Azurite's,
// and the fake's, is the last name listed, and any name works as a marker.
// Clients must pass NextMarker back as it came.
//
// Names are in the order of their UTF-16 code units (compareNames), as
// Azurite compares them (JavaScript strings), markers and startFrom
// included.
func (s *Service) list(c *call) {
	q := c.req.URL.Query()
	if q.Get("delimiter") != "" {
		c.failf(http.StatusNotImplemented, "NotImplemented", "memblob does not list blobs by hierarchy (delimiter)")
		c.op = OpUnsupported
		return
	}
	cs := s.containers[c.container]
	if cs == nil {
		c.fail(http.StatusNotFound, "ContainerNotFound")
		return
	}
	maxResults := MaxListResults
	if v := q.Get("maxresults"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			c.fail(http.StatusBadRequest, "InvalidQueryParameterValue")
			return
		case n < 1:
			// Divergence from Azurite, the only one where the fake
			// follows Azure: Azurite answers a bare 400 (no error
			// code, no body: its parser fails), Azure documents 400
			// OutOfRangeQueryParameterValue. The contract test
			// "list-max-results" marks it.
			c.fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue")
			return
		case n < MaxListResults:
			maxResults = n
		}
	}
	prefix, marker, startFrom := q.Get("prefix"), q.Get("marker"), q.Get("startFrom")
	withMetadata := false
	for _, inc := range strings.Split(q.Get("include"), ",") {
		if strings.EqualFold(strings.TrimSpace(inc), "metadata") {
			withMetadata = true
		}
	}

	// The first name after marker, at or after startFrom and prefix.
	from := prefix
	if compareNames(startFrom, from) > 0 {
		from = startFrom
	}
	i, _ := slices.BinarySearchFunc(cs.names, from, compareNames)
	for i < len(cs.names) && marker != "" && compareNames(cs.names[i], marker) <= 0 {
		i++
	}
	var page []*blobState
	next := ""
	for ; i < len(cs.names) && strings.HasPrefix(cs.names[i], prefix); i++ {
		if len(page) == maxResults {
			// Azurite gives a NextMarker only when another blob
			// follows, and then the last name of this page.
			next = page[len(page)-1].name
			break
		}
		b := cs.blobs[cs.names[i]]
		b.lease.at(c.now)
		page = append(page, b)
	}

	var buf bytes.Buffer
	buf.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>`)
	buf.WriteString(`<EnumerationResults ServiceEndpoint="`)
	xmlEscape(&buf, "http://"+c.req.URL.Host+"/"+c.account)
	buf.WriteString(`" ContainerName="`)
	xmlEscape(&buf, c.container)
	buf.WriteString(`">`)
	element(&buf, "Prefix", prefix)
	element(&buf, "Marker", marker)
	element(&buf, "MaxResults", strconv.Itoa(maxResults))
	buf.WriteString("<Blobs>")
	for _, b := range page {
		writeBlobItem(&buf, b, withMetadata)
	}
	buf.WriteString("</Blobs>")
	element(&buf, "NextMarker", next)
	buf.WriteString("</EnumerationResults>")

	h := c.ok(http.StatusOK)
	h.Set("Content-Type", "application/xml")
	c.payload = buf.Bytes()
}

// writeBlobItem writes one <Blob> of a listing, with the properties Azurite
// lists. The ETag is unquoted there, as Azure and Azurite list it (a
// GetProperties ETag is quoted: compare them with the quotes removed).
func writeBlobItem(buf *bytes.Buffer, b *blobState, withMetadata bool) {
	buf.WriteString("<Blob>")
	element(buf, "Name", b.name)
	buf.WriteString("<Properties>")
	element(buf, "Creation-Time", httpTime(b.created))
	element(buf, "Last-Modified", httpTime(b.lastModified))
	element(buf, "Etag", b.etag)
	element(buf, "Content-Length", strconv.Itoa(len(b.content)))
	element(buf, "Content-Type", b.contentType)
	element(buf, "Content-MD5", base64.StdEncoding.EncodeToString(b.contentMD5))
	element(buf, "BlobType", "BlockBlob")
	element(buf, "LeaseStatus", b.lease.status())
	element(buf, "LeaseState", b.lease.state)
	if d := b.lease.durationType(); d != "" {
		element(buf, "LeaseDuration", d)
	}
	element(buf, "ServerEncrypted", "true")
	element(buf, "AccessTier", "Hot")
	element(buf, "AccessTierInferred", "true")
	element(buf, "AccessTierChangeTime", httpTime(b.created))
	buf.WriteString("</Properties>")
	if withMetadata && len(b.metadata) > 0 {
		buf.WriteString("<Metadata>")
		for _, k := range sortedKeys(b.metadata) {
			// Metadata names are C# identifiers (parseMetadata),
			// so they are valid XML element names.
			element(buf, k, b.metadata[k])
		}
		buf.WriteString("</Metadata>")
	}
	buf.WriteString("</Blob>")
}

// element writes <name>value</name>, or <name/> when value is empty, as
// Azurite does.
func element(buf *bytes.Buffer, name, value string) {
	buf.WriteByte('<')
	buf.WriteString(name)
	if value == "" {
		buf.WriteString("/>")
		return
	}
	buf.WriteByte('>')
	xmlEscape(buf, value)
	buf.WriteString("</")
	buf.WriteString(name)
	buf.WriteByte('>')
}

// xmlEscape writes s escaped as XML character data. Most names and values
// need no escaping: they are written as they are, without allocating.
func xmlEscape(buf *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '&' || c == '<' || c == '>' || c == '"' || c == '\'' {
			_ = xml.EscapeText(buf, []byte(s))
			return
		}
	}
	buf.WriteString(s)
}

// compareNames orders blob names as Azurite lists them: by their UTF-16
// code units, as JavaScript compares strings. That is Go's order (UTF-8
// bytes, code points) but for a character above U+FFFF, a surrogate pair
// (U+D800..U+DFFF) in UTF-16, which sorts before U+E000..U+FFFF there and
// after them in UTF-8. The names with a given prefix still come together,
// from the prefix on: a listing by prefix is one run of the order. Names
// are taken to be valid UTF-8, as the SDK sends them.
func compareNames(a, b string) int {
	// The first byte that differs is in the first rune that differs,
	// which starts at or before it.
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(a) && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	switch {
	case i == len(a) && i == len(b):
		return 0
	case i == len(a):
		return -1
	case i == len(b):
		return 1
	case (ra > 0xFFFF) != (rb > 0xFFFF) && min(ra, rb) >= 0xE000:
		// One above U+FFFF, its high surrogate below the other.
		if ra > 0xFFFF {
			return -1
		}
		return 1
	}
	return strings.Compare(a[i:], b[i:])
}
