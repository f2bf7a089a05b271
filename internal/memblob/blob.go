package memblob

import (
	"crypto/md5"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// containerState is one container and its blobs.
type containerState struct {
	name         string
	metadata     map[string]string
	etag         string
	lastModified time.Time
	blobs        map[string]*blobState
	names        []string // the blobs' names, in listing order (compareNames)
}

// blobState is one block blob.
type blobState struct {
	name         string
	content      []byte
	contentType  string
	contentMD5   []byte
	metadata     map[string]string
	etag         string // unquoted
	created      time.Time
	lastModified time.Time
	lease        leaseInfo
}

// report records b's state (b may be nil: no blob) as the call's result
// for the observer.
func (b *blobState) report(c *call) {
	if b == nil {
		c.result = blobResult{}
		return
	}
	c.result = blobResult{etag: b.etag, leaseState: b.lease.state, leaseExpiry: b.lease.until(), metadata: b.metadata}
	if b.lease.state != stateAvailable {
		c.result.leaseID = b.lease.id
	}
}

// locate finds the call's container and blob (nil if there is none), its
// lease brought to the call's time. A missing container fails the call
// with 404 ContainerNotFound, and locate reports false.
func (s *Service) locate(c *call) (*containerState, *blobState, bool) {
	cs := s.containers[c.container]
	if cs == nil {
		c.fail(http.StatusNotFound, "ContainerNotFound")
		return nil, nil, false
	}
	b := cs.blobs[c.blob]
	if b != nil {
		b.lease.at(c.now)
	}
	return cs, b, true
}

// httpTime formats t as HTTP dates are: RFC 1123 in GMT, to the second.
func httpTime(t time.Time) string {
	return t.UTC().Format(http.TimeFormat)
}

// addBlob puts b into the container, replacing any blob of its name.
func (cs *containerState) addBlob(b *blobState) {
	if _, ok := cs.blobs[b.name]; !ok {
		i, _ := slices.BinarySearchFunc(cs.names, b.name, compareNames)
		cs.names = slices.Insert(cs.names, i, b.name)
	}
	cs.blobs[b.name] = b
}

// removeBlob takes the blob name out of the container.
func (cs *containerState) removeBlob(name string) {
	if _, ok := cs.blobs[name]; !ok {
		return
	}
	delete(cs.blobs, name)
	if i, ok := slices.BinarySearchFunc(cs.names, name, compareNames); ok {
		cs.names = slices.Delete(cs.names, i, i+1)
	}
}

// createContainer serves Create Container (PUT ?restype=container).
func (s *Service) createContainer(c *call) {
	md, ok := parseMetadata(c)
	if !ok {
		return
	}
	if cs := s.containers[c.container]; cs != nil {
		c.fail(http.StatusConflict, "ContainerAlreadyExists")
		c.result = blobResult{etag: cs.etag}
		return
	}
	// Azurite divergence: Azure refuses for about 30 s to create a
	// container of the name of one just deleted (409
	// ContainerBeingDeleted); Azurite, and the fake, create it at once
	// (LEASE-FACTS).
	cs := &containerState{name: c.container, metadata: md, etag: s.newETag(), lastModified: c.now,
		blobs: map[string]*blobState{}}
	s.containers[c.container] = cs
	h := c.ok(http.StatusCreated)
	h.Set("Etag", quote(cs.etag))
	h.Set("Last-Modified", httpTime(cs.lastModified))
	c.result = blobResult{etag: cs.etag}
}

// deleteContainer serves Delete Container (DELETE ?restype=container). It
// takes all the container's blobs with it at once, leased or not.
func (s *Service) deleteContainer(c *call) {
	cs := s.containers[c.container]
	if cs == nil {
		c.fail(http.StatusNotFound, "ContainerNotFound")
		return
	}
	if !checkContainerConditions(c, cs) {
		c.result = blobResult{etag: cs.etag}
		return
	}
	delete(s.containers, c.container)
	c.ok(http.StatusAccepted)
}

// getContainerProperties serves Get Container Properties (GET or HEAD
// ?restype=container).
func (s *Service) getContainerProperties(c *call) {
	cs := s.containers[c.container]
	if cs == nil {
		c.fail(http.StatusNotFound, "ContainerNotFound")
		return
	}
	h := c.ok(http.StatusOK)
	h.Set("Etag", quote(cs.etag))
	h.Set("Last-Modified", httpTime(cs.lastModified))
	for _, k := range sortedKeys(cs.metadata) {
		h.Set("X-Ms-Meta-"+k, cs.metadata[k])
	}
	h.Set("X-Ms-Lease-State", stateAvailable)
	h.Set("X-Ms-Lease-Status", "unlocked")
	h.Set("X-Ms-Has-Immutability-Policy", "false")
	h.Set("X-Ms-Has-Legal-Hold", "false")
	c.result = blobResult{etag: cs.etag}
}

// checkContainerConditions applies If-Modified-Since and
// If-Unmodified-Since to a container deletion, the only conditions Azure
// takes there.
func checkContainerConditions(c *call, cs *containerState) bool {
	lm := cs.lastModified.Truncate(time.Second)
	if v := c.get("If-Modified-Since"); v != "" {
		if t, err := http.ParseTime(v); err == nil && !lm.After(t) {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	}
	if v := c.get("If-Unmodified-Since"); v != "" {
		if t, err := http.ParseTime(v); err == nil && t.Before(lm) {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	}
	return true
}

// upload serves Put Blob of a block blob (PUT with x-ms-blob-type:
// BlockBlob). It replaces a blob of the same name, keeping its lease.
func (s *Service) upload(c *call) {
	if !strings.EqualFold(c.get("x-ms-blob-type"), "BlockBlob") {
		c.failf(http.StatusNotImplemented, "NotImplemented",
			"memblob serves block blobs only, not x-ms-blob-type %q", c.get("x-ms-blob-type"))
		c.op = OpUnsupported
		return
	}
	cs, old, ok := s.locate(c)
	if !ok {
		return
	}
	defer func() {
		cs.blobs[c.blob].report(c)
	}()
	md, ok := parseMetadata(c)
	if !ok {
		return
	}
	if !checkWriteConditions(c, old) {
		return
	}
	// Create only if absent: If-None-Match: * on an existing blob is 409
	// BlobAlreadyExists for Put Blob, as on Azure.
	if old != nil && strings.TrimSpace(c.get("If-None-Match")) == "*" {
		c.fail(http.StatusConflict, "BlobAlreadyExists")
		return
	}
	b := &blobState{
		name:         c.blob,
		content:      c.body,
		metadata:     md,
		etag:         s.newETag(),
		created:      c.now,
		lastModified: c.now,
		lease:        leaseInfo{state: stateAvailable},
	}
	b.contentType = c.get("x-ms-blob-content-type")
	if b.contentType == "" {
		b.contentType = c.get("Content-Type")
	}
	if b.contentType == "" {
		b.contentType = "application/octet-stream"
	}
	sum := md5.Sum(c.body)
	b.contentMD5 = sum[:]
	if old != nil {
		if !old.lease.checkWrite(c, c.get("x-ms-lease-id")) {
			return
		}
		// The blob written over keeps its lease.
		b.lease = old.lease
		b.lease.afterWrite()
	}
	cs.addBlob(b)
	hh := c.ok(http.StatusCreated)
	hh.Set("Etag", quote(b.etag))
	hh.Set("Last-Modified", httpTime(b.lastModified))
	hh.Set("Content-Md5", base64.StdEncoding.EncodeToString(b.contentMD5))
	hh.Set("X-Ms-Request-Server-Encrypted", "true")
}

// read serves Get Blob Properties (HEAD) and Get Blob (GET): the blob's
// properties, metadata and lease as headers, and for GET its content.
func (s *Service) read(c *call) {
	_, b, ok := s.locate(c)
	if !ok {
		return
	}
	defer b.report(c)
	if !checkReadConditions(c, b) {
		return
	}
	if b == nil {
		c.fail(http.StatusNotFound, "BlobNotFound")
		return
	}
	if !b.lease.checkRead(c, c.get("x-ms-lease-id")) {
		return
	}
	h := c.ok(http.StatusOK)
	h.Set("Content-Length", strconv.Itoa(len(b.content)))
	h.Set("Content-Type", b.contentType)
	h.Set("Content-Md5", base64.StdEncoding.EncodeToString(b.contentMD5))
	h.Set("Accept-Ranges", "bytes")
	h.Set("Etag", quote(b.etag))
	h.Set("Last-Modified", httpTime(b.lastModified))
	h.Set("X-Ms-Creation-Time", httpTime(b.created))
	h.Set("X-Ms-Blob-Type", "BlockBlob")
	h.Set("X-Ms-Lease-State", b.lease.state)
	h.Set("X-Ms-Lease-Status", b.lease.status())
	if d := b.lease.durationType(); d != "" {
		h.Set("X-Ms-Lease-Duration", d)
	}
	h.Set("X-Ms-Server-Encrypted", "true")
	h.Set("X-Ms-Access-Tier", "Hot")
	h.Set("X-Ms-Access-Tier-Inferred", "true")
	for _, k := range sortedKeys(b.metadata) {
		h.Set("X-Ms-Meta-"+k, b.metadata[k])
	}
	if c.op == OpDownload {
		c.payload = b.content
	}
}

// setMetadata serves Set Blob Metadata (PUT ?comp=metadata): it replaces
// all the blob's metadata and gives it a new ETag and Last-Modified.
func (s *Service) setMetadata(c *call) {
	// Azurite reads the metadata before it looks for the container or
	// the blob: invalid metadata is 400 whatever else is wrong.
	md, ok := parseMetadata(c)
	cs := s.containers[c.container]
	var b *blobState
	if cs != nil {
		b = cs.blobs[c.blob]
	}
	if b != nil {
		b.lease.at(c.now)
	}
	defer b.report(c)
	switch {
	case !ok:
		return
	case cs == nil:
		c.fail(http.StatusNotFound, "ContainerNotFound")
		return
	}
	if !checkWriteConditions(c, b) {
		return
	}
	if b == nil {
		c.fail(http.StatusNotFound, "BlobNotFound")
		return
	}
	if !b.lease.checkWrite(c, c.get("x-ms-lease-id")) {
		return
	}
	b.lease.afterWrite()
	b.metadata = md
	b.etag = s.newETag()
	b.lastModified = c.now
	h := c.ok(http.StatusOK)
	h.Set("Etag", quote(b.etag))
	h.Set("Last-Modified", httpTime(b.lastModified))
	h.Set("X-Ms-Request-Server-Encrypted", "true")
}

// deleteBlob serves Delete Blob.
func (s *Service) deleteBlob(c *call) {
	cs, b, ok := s.locate(c)
	if !ok {
		return
	}
	if !checkWriteConditions(c, b) {
		b.report(c)
		return
	}
	if b == nil {
		c.fail(http.StatusNotFound, "BlobNotFound")
		return
	}
	if !b.lease.checkWrite(c, c.get("x-ms-lease-id")) {
		b.report(c)
		return
	}
	cs.removeBlob(c.blob)
	h := c.ok(http.StatusAccepted)
	h.Set("X-Ms-Delete-Type-Permanent", "true")
}

// parseMetadata reads the request's x-ms-meta-* headers. Names keep the
// case the client sent (the SDK sets its headers without canonicalising
// them); a name that is not a C# identifier is 400 InvalidMetadata, as on
// Azurite and Azure. A name sent twice, or a value storage would not read
// as sent, was refused before (signedAsSent).
func parseMetadata(c *call) (map[string]string, bool) {
	const prefix = "x-ms-meta-"
	var md map[string]string
	for k, vs := range c.req.Header {
		if len(k) <= len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) {
			continue
		}
		name := k[len(prefix):]
		if !validMetadataName(name) {
			c.fail(http.StatusBadRequest, "InvalidMetadata")
			return nil, false
		}
		if md == nil {
			md = map[string]string{}
		}
		md[name] = strings.Join(vs, ",") // one value: signedAsSent
	}
	return md, true
}

// validMetadataName reports whether name is a C# identifier, as Azure
// requires metadata names to be: [A-Za-z_][A-Za-z0-9_]*.
func validMetadataName(name string) bool {
	for i := 0; i < len(name); i++ {
		ch := name[i]
		letter := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch == '_'
		if !letter && (i == 0 || ch < '0' || ch > '9') {
			return false
		}
	}
	return name != ""
}

// conditions are a request's conditional headers, parsed as Azurite parses
// them: If-Match and If-None-Match may list several comma-separated ETags,
// each with its quotes removed.
type conditions struct {
	ifMatch, ifNoneMatch               []string
	ifModifiedSince, ifUnmodifiedSince *time.Time
}

// parseConditions reads the call's conditional headers. Dates that do not
// parse are ignored, as Azurite ignores them.
func parseConditions(c *call) conditions {
	var cond conditions
	split := func(v string) []string {
		if v == "" {
			return nil
		}
		parts := strings.Split(v, ",")
		for i, p := range parts {
			if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
				parts[i] = p[1 : len(p)-1]
			}
		}
		return parts
	}
	cond.ifMatch = split(c.get("If-Match"))
	cond.ifNoneMatch = split(c.get("If-None-Match"))
	date := func(v string) *time.Time {
		if v == "" {
			return nil
		}
		t, err := http.ParseTime(v)
		if err != nil {
			return nil
		}
		return &t
	}
	cond.ifModifiedSince = date(c.get("If-Modified-Since"))
	cond.ifUnmodifiedSince = date(c.get("If-Unmodified-Since"))
	return cond
}

// checkWriteConditions applies the conditional headers of a write (Put
// Blob, Set Blob Metadata, Delete Blob, the lease actions) to b (nil: no
// such blob), as Azurite's WriteConditionalHeadersValidator does. It
// reports false after failing the call with 400
// MultipleConditionHeadersNotSupported or 412 ConditionNotMet.
//
// Azurite divergence: If-None-Match: * on an existing blob passes here,
// for every write but Put Blob (409 BlobAlreadyExists, see upload). Azure
// documents that * fails the operation when the resource exists (412
// ConditionNotMet); Azurite's source says that Azure's Set Blob Properties
// lets it pass nonetheless, so what Azure answers for each operation is
// unverified. The contract test "if-none-match-star-existing" pins
// Azurite's answers.
func checkWriteConditions(c *call, b *blobState) bool {
	cond := parseConditions(c)
	if !validCombination(c, cond) {
		return false
	}
	if b == nil {
		// Only If-Match can fail on a blob that does not exist.
		if len(cond.ifNoneMatch) == 0 && len(cond.ifMatch) > 0 {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
		return true
	}
	lm := b.lastModified.Truncate(time.Second)
	switch {
	case len(cond.ifNoneMatch) > 0:
		if cond.ifNoneMatch[0] != "*" && cond.ifNoneMatch[0] == b.etag {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	case len(cond.ifMatch) > 0:
		if cond.ifMatch[0] != "*" && cond.ifMatch[0] != b.etag {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	case cond.ifModifiedSince != nil:
		if !lm.After(*cond.ifModifiedSince) {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	case cond.ifUnmodifiedSince != nil:
		if cond.ifUnmodifiedSince.Before(lm) {
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		}
	}
	return true
}

// validCombination rejects what Azurite rejects among conditional headers
// with 400 MultipleConditionHeadersNotSupported: more than one ETag in
// If-Match or If-None-Match, more than two conditions, or two that are not
// If-Match with If-Unmodified-Since or If-None-Match with
// If-Modified-Since.
func validCombination(c *call, cond conditions) bool {
	if len(cond.ifMatch) > 1 || len(cond.ifNoneMatch) > 1 {
		c.fail(http.StatusBadRequest, "MultipleConditionHeadersNotSupported")
		return false
	}
	n, inmOrIMS := 0, 0
	for _, set := range []bool{len(cond.ifMatch) > 0, cond.ifUnmodifiedSince != nil} {
		if set {
			n++
		}
	}
	for _, set := range []bool{len(cond.ifNoneMatch) > 0, cond.ifModifiedSince != nil} {
		if set {
			n++
			inmOrIMS++
		}
	}
	if n > 2 || n == 2 && inmOrIMS == 1 {
		c.fail(http.StatusBadRequest, "MultipleConditionHeadersNotSupported")
		return false
	}
	return true
}

// checkReadConditions applies the conditional headers of a read (Get Blob,
// Get Blob Properties) to b (nil: no such blob), as Azurite's
// ReadConditionalHeadersValidator does: a failed If-Match or
// If-Unmodified-Since is 412, a matching If-None-Match or failed
// If-Modified-Since is 304, and If-None-Match: * is 400
// UnsatisfiableCondition.
func checkReadConditions(c *call, b *blobState) bool {
	cond := parseConditions(c)
	star := len(cond.ifNoneMatch) > 0 && cond.ifNoneMatch[0] == "*"
	if b == nil {
		switch {
		case len(cond.ifMatch) > 0:
			c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
			return false
		case star:
			c.fail(http.StatusBadRequest, "UnsatisfiableCondition")
			return false
		}
		return true
	}
	if star {
		c.fail(http.StatusBadRequest, "UnsatisfiableCondition")
		return false
	}
	lm := b.lastModified.Truncate(time.Second)
	var ifMatch, ifUnmodified, ifNoneMatch, ifModified *bool
	if cond.ifMatch != nil {
		ok := slices.Contains(cond.ifMatch, b.etag) || cond.ifMatch[0] == "*"
		ifMatch = &ok
	}
	if cond.ifUnmodifiedSince != nil {
		ok := !lm.After(*cond.ifUnmodifiedSince)
		ifUnmodified = &ok
	}
	if cond.ifNoneMatch != nil {
		ok := !slices.Contains(cond.ifNoneMatch, b.etag)
		ifNoneMatch = &ok
	}
	if cond.ifModifiedSince != nil {
		ok := cond.ifModifiedSince.Before(lm)
		ifModified = &ok
	}
	is := func(p *bool, v bool) bool { return p != nil && *p == v }
	switch {
	case is(ifMatch, false), is(ifUnmodified, false):
		c.fail(http.StatusPreconditionFailed, "ConditionNotMet")
		return false
	case is(ifNoneMatch, false) && !is(ifModified, true),
		is(ifModified, false) && !is(ifNoneMatch, true):
		c.fail(http.StatusNotModified, "ConditionNotMet")
		return false
	}
	return true
}
