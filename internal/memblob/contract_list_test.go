package memblob

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

func init() { contractCases = append(contractCases, listCases...) }

// withMetadata lists with include=metadata.
var withMetadata = container.ListBlobsInclude{Metadata: true}

// listCases are List Blobs (flat): order, paging, prefix, what each blob
// shows.
var listCases = []contractCase{
	{name: "list-order-and-properties", run: func(t *testing.T, e *env) {
		for _, n := range []string{"m", "a/2", "z", "a/10", "B", "a"} {
			e.put(t, n, map[string]string{"name": n})
		}
		etag := e.put(t, "m", map[string]string{"name": "m", "again": "yes"})
		pages := listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})
		equal(t, "pages", len(pages), 1)
		p := pages[0]
		equalSlices(t, "names in byte order", names(p), []string{"B", "a", "a/10", "a/2", "m", "z"})
		equal(t, "max results", deref(p.MaxResults), int32(5000))
		equal(t, "no next marker", deref(p.NextMarker), "")
		for _, b := range p.Segment.BlobItems {
			if *b.Name != "m" {
				continue
			}
			// Listings carry the ETag without quotes.
			equal(t, "listed ETag", string(*b.Properties.ETag), string(etag[1:len(etag)-1]))
			equal(t, "Last-Modified", b.Properties.LastModified.Equal(*e.props(t, "m").LastModified), true)
			equal(t, "length", deref(b.Properties.ContentLength), int64(1))
			equal(t, "lease state", deref(b.Properties.LeaseState), available)
			equal(t, "lease status", deref(b.Properties.LeaseStatus), unlocked)
			equalMaps(t, "metadata", flat(b.Metadata), map[string]string{"name": "m", "again": "yes"})
		}
		// Without include=metadata, none.
		p = listAll(t, e, nil)[0]
		for _, b := range p.Segment.BlobItems {
			equal(t, "metadata without include", len(b.Metadata), 0)
		}
	}},
	{name: "list-empty", run: func(t *testing.T, e *env) {
		p := listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})
		equal(t, "pages", len(p), 1)
		equal(t, "blobs", len(p[0].Segment.BlobItems), 0)
		e.put(t, "nometa", nil)
		p = listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})
		equal(t, "no metadata", len(p[0].Segment.BlobItems[0].Metadata), 0)
	}},
	{name: "list-paging", run: func(t *testing.T, e *env) {
		for _, n := range []string{"g", "f", "e", "d", "c", "b", "a"} {
			e.put(t, n, nil)
		}
		pages := listAll(t, e, &container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](3)})
		equal(t, "pages", len(pages), 3)
		equalSlices(t, "page 1", names(pages[0]), []string{"a", "b", "c"})
		equalSlices(t, "page 2", names(pages[1]), []string{"d", "e", "f"})
		equalSlices(t, "page 3", names(pages[2]), []string{"g"})
		// Azurite's marker is the last name of the page.
		equal(t, "next marker 1", deref(pages[0].NextMarker), "c")
		equal(t, "marker 2", deref(pages[1].Marker), "c")
		equal(t, "max results", deref(pages[1].MaxResults), int32(3))
		// A last page that is full has no NextMarker.
		e.put(t, "h", nil)
		e.put(t, "i", nil)
		pages = listAll(t, e, &container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](3)})
		equal(t, "pages of exactly 3", len(pages), 3)
		equal(t, "last NextMarker", deref(pages[2].NextMarker), "")
		// A marker of one's own: the names after it.
		p, err := e.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Marker: to.Ptr("cc")}).NextPage(e.ctx)
		noErr(t, err, "list from a marker")
		equalSlices(t, "after cc", names(p), []string{"d", "e", "f", "g", "h", "i"})
		// A blob created between pages, before the marker, is not seen;
		// after it, it is.
		pager := e.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](4)})
		first, err := pager.NextPage(e.ctx)
		noErr(t, err, "page 1")
		equalSlices(t, "page 1 of 4", names(first), []string{"a", "b", "c", "d"})
		e.put(t, "bb", nil)
		e.put(t, "dd", nil)
		second, err := pager.NextPage(e.ctx)
		noErr(t, err, "page 2")
		equalSlices(t, "page 2 of 4", names(second), []string{"dd", "e", "f", "g"})
	}},
	{name: "list-prefix", run: func(t *testing.T, e *env) {
		for _, n := range []string{"s/1", "s/2", "s/3", "s", "t/1", "r/9", "s0"} {
			e.put(t, n, nil)
		}
		pages := listAll(t, e, &container.ListBlobsFlatOptions{Prefix: to.Ptr("s/"), MaxResults: to.Ptr[int32](2)})
		equal(t, "pages", len(pages), 2)
		equalSlices(t, "page 1", names(pages[0]), []string{"s/1", "s/2"})
		equalSlices(t, "page 2", names(pages[1]), []string{"s/3"})
		equal(t, "prefix echoed", deref(pages[0].Prefix), "s/")
		p := listAll(t, e, &container.ListBlobsFlatOptions{Prefix: to.Ptr("s")})
		equalSlices(t, "prefix s", names(p[0]), []string{"s", "s/1", "s/2", "s/3", "s0"})
		p = listAll(t, e, &container.ListBlobsFlatOptions{Prefix: to.Ptr("q")})
		equal(t, "nothing under q", len(p[0].Segment.BlobItems), 0)
	}},
	{name: "list-start-from", run: func(t *testing.T, e *env) {
		for _, n := range []string{"a", "b", "c", "d"} {
			e.put(t, n, nil)
		}
		p := listAll(t, e, &container.ListBlobsFlatOptions{StartFrom: to.Ptr("b")})
		equalSlices(t, "from b", names(p[0]), []string{"b", "c", "d"})
	}},
	{name: "list-order-above-uffff", run: func(t *testing.T, e *env) {
		// Names sort as UTF-16 code units: a character above U+FFFF is
		// a surrogate pair (U+D800..U+DFFF), before U+E000..U+FFFF,
		// where UTF-8's byte order puts it after them.
		const (
			bmp   = "a\u00e9"     // é
			high  = "a\uff21"     // fullwidth A, above the surrogates
			priv  = "a\ue000"     // the first character after them
			sup   = "a\U00010000" // the first above U+FFFF
			emoji = "a\U0001F600"
		)
		for _, n := range []string{"b", high, emoji + "x", priv, emoji, sup, bmp, "a"} {
			e.put(t, n, nil)
		}
		order := []string{"a", bmp, sup, emoji, emoji + "x", priv, high, "b"}
		equalSlices(t, "all", names(listAll(t, e, nil)[0]), order)
		pages := listAll(t, e, &container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](3)})
		var paged []string
		for _, p := range pages {
			paged = append(paged, names(p)...)
		}
		equalSlices(t, "paged by 3", paged, order)
		equal(t, "pages", len(pages), 3)
		p, err := e.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Marker: to.Ptr(emoji)}).NextPage(e.ctx)
		noErr(t, err, "list after a marker")
		equalSlices(t, "after "+emoji, names(p), order[4:])
		p = listAll(t, e, &container.ListBlobsFlatOptions{StartFrom: to.Ptr(sup)})[0]
		equalSlices(t, "from "+sup, names(p), order[2:])
		p = listAll(t, e, &container.ListBlobsFlatOptions{Prefix: to.Ptr(emoji)})[0]
		equalSlices(t, "prefix "+emoji, names(p), []string{emoji, emoji + "x"})
		p = listAll(t, e, &container.ListBlobsFlatOptions{Prefix: to.Ptr("a"), StartFrom: to.Ptr(priv)})[0]
		equalSlices(t, "prefix a from "+priv, names(p), []string{priv, high})
	}},
	{name: "list-max-results", run: func(t *testing.T, e *env) {
		e.put(t, "a", nil)
		p, err := e.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{MaxResults: to.Ptr[int32](6000)}).NextPage(e.ctx)
		noErr(t, err, "maxresults 6000")
		equal(t, "cut to 5000", deref(p.MaxResults), int32(5000))
		e.divergence("maxresults 0: Azurite a bare 400, the fake Azure's 400 OutOfRangeQueryParameterValue", func() {
			for _, n := range []int32{0, -3} {
				_, err = e.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{MaxResults: to.Ptr(n)}).NextPage(e.ctx)
				var re *azcore.ResponseError
				if !errors.As(err, &re) || re.StatusCode != 400 {
					t.Errorf("maxresults %d: got %v, want a 400", n, err)
				}
				if e.backend == "memblob" {
					wantErr(t, err, 400, "OutOfRangeQueryParameterValue")
				}
			}
		})
	}},
	{name: "list-leases", run: func(t *testing.T, e *env) {
		for _, n := range []string{"available", "broken", "breaking", "fixed", "infinite"} {
			e.put(t, n, nil)
		}
		e.acquire(t, "fixed", idA, 15)
		e.acquire(t, "infinite", idA, -1)
		_, err := e.acquire(t, "breaking", idA, 60).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](30)})
		noErr(t, err, "break")
		_, err = e.acquire(t, "broken", idA, 60).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break")
		p := listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})[0]
		want := map[string][3]string{
			"available": {"available", "unlocked", ""},
			"broken":    {"broken", "unlocked", ""},
			"breaking":  {"breaking", "locked", ""},
			"fixed":     {"leased", "locked", "fixed"},
			"infinite":  {"leased", "locked", "infinite"},
		}
		for _, b := range p.Segment.BlobItems {
			got := [3]string{string(deref(b.Properties.LeaseState)), string(deref(b.Properties.LeaseStatus)),
				string(deref(b.Properties.LeaseDuration))}
			equal(t, *b.Name, got, want[*b.Name])
		}
	}},
}
