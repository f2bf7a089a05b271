package leaderelection

import (
	"bytes"
	"context"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/blobelect/leaderelection/internal/memblob"
)

// The other writer's rewrite of a blob's content (sim_writers_test.go), as
// a script that edits a file in the container does: it uploads the blob
// again, its metadata as it stands (with the writer's marker), If-Match
// the ETag it read, without a lease ID or under the one it guessed, with
// one of its numbers changed, lower or higher (half the time, if it has
// one), or else with its content as it is, with a line dropped, or with a
// line of its own added; two times in three, it edits a blob that holds
// content rather than draw among all its actions. Every
// blob of the fleet may be drawn: a session's held list (whose lines name
// shards, terms, claim gens and ETags), a note, a record's blob (whose
// content is empty: it is uploaded as it is). What another writer puts on
// a blob is read as data and never trusted (docs/other-writers.md), so no
// section of docs/limits.md holds any of it back: a blob's record is kept
// as it stands (a term written lower is the metadata action's, held back
// there).
func (w simWriterCall) content(ctx context.Context, name string, st memblob.BlobState, exists bool, id, whose string) (string, error) {
	if !exists {
		return "", nil
	}
	md := map[string]*string{}
	for k, v := range st.Metadata {
		md[k] = &v
	}
	marker := "1"
	md[simWriterMarker] = &marker
	body, what := w.edit(string(st.Content))
	opts := &blockblob.UploadOptions{Metadata: md, AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &st.ETag}}}
	if w.intn(2) == 0 {
		opts.AccessConditions.LeaseAccessConditions = &blob.LeaseAccessConditions{LeaseID: &id}
		what += " (" + whose + " ID)"
	}
	_, err := w.cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader([]byte(body))), opts)
	return what, err
}

// edit is text edited as the writer's content action draws (see content),
// and what it did.
func (w simWriterCall) edit(text string) (string, string) {
	lines := strings.Split(text, "\n")
	var numbers [][2]int // line, field
	for i, line := range lines {
		for j, field := range strings.Split(line, " ") {
			if _, err := strconv.ParseInt(field, 10, 64); err == nil {
				numbers = append(numbers, [2]int{i, j})
			}
		}
	}
	switch x := w.intn(6); {
	case x < 3 && len(numbers) > 0:
		at := numbers[w.intn(len(numbers))]
		fields := strings.Split(lines[at[0]], " ")
		n, _ := strconv.ParseInt(fields[at[1]], 10, 64)
		what := "content: a number raised"
		if n > 0 && w.intn(2) == 0 {
			n, what = w.r.Int64N(n), "content: a number lowered"
		} else {
			n += 1 + w.r.Int64N(1000)
		}
		fields[at[1]] = strconv.FormatInt(n, 10)
		lines[at[0]] = strings.Join(fields, " ")
		return strings.Join(lines, "\n"), what
	case x == 3 && text != "":
		i := w.intn(len(lines))
		return strings.Join(append(lines[:i:i], lines[i+1:]...), "\n"), "content: a line dropped"
	case x == 4:
		return text + "\nanother tool's line 1", "content: a line added"
	}
	return text, "content: as it is"
}
