package blobstore

import (
	"context"
	"iter"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// ListOptions say what to list and how.
type ListOptions struct {
	// Call names the listing in errors (Op default "list blobs", and
	// Error.Blob is the prefix) and bounds each page (Timeout: one page's
	// request, not the whole listing).
	Call
	// Prefix selects the blobs whose names start with it; "" lists all.
	Prefix string
	// Metadata asks for each blob's metadata along with its properties:
	// one request then observes a whole prefix's records.
	Metadata bool
	// PageSize is how many blobs a page asks for, at most 5,000 (Azure's
	// maximum, and its default: 0). A page is one piece of work for the
	// server, which other requests may wait behind.
	PageSize int32
}

// Item is one blob of a listing. Its Props carry no lease ID or expiry
// (no listing shows them), and Received is its page's.
type Item struct {
	Name string // the blob's full name, prefix included
	Props
}

// Page is one page of a listing: one request's answer.
type Page struct {
	Items []Item
	// Received is when the page arrived, by this machine's clock with its
	// monotonic reading: after the server read what it describes.
	Received time.Time
}

// List lists the blobs under o.Prefix, in name order, a page a request. The
// sequence yields each page, or one error (a classified [*Error]: a missing
// container has Code [ContainerNotFound]) and ends. Each page is fetched
// when the loop asks for it, bounded by the call's timeout, and that
// bound's context is released before the page is yielded: the loop's body
// may take as long as it needs, and make requests of its own. Breaking out
// of the loop sends no more requests.
func (cl *Client) List(ctx context.Context, o ListOptions) iter.Seq2[Page, error] {
	c := o.Call.named("list blobs")
	return func(yield func(Page, error) bool) {
		opts := &container.ListBlobsFlatOptions{Prefix: &o.Prefix}
		if o.Prefix == "" {
			opts.Prefix = nil
		}
		if o.Metadata {
			opts.Include = container.ListBlobsInclude{Metadata: true}
		}
		if o.PageSize > 0 {
			size := o.PageSize
			opts.MaxResults = &size
		}
		pager := cl.cc.NewListBlobsFlatPager(opts)
		for pager.More() {
			callCtx, cancel := cl.bound(ctx, c)
			resp, err := pager.NextPage(callCtx)
			received := time.Now()
			cancel()
			if err != nil {
				yield(Page{}, cl.classify(c, o.Prefix, err))
				return
			}
			cl.answered()
			page := Page{Received: received}
			if resp.Segment != nil {
				page.Items = make([]Item, 0, len(resp.Segment.BlobItems))
				for _, bi := range resp.Segment.BlobItems {
					if bi == nil || bi.Name == nil || bi.Properties == nil {
						continue // not a blob's entry: no well-formed listing has one
					}
					p := bi.Properties
					page.Items = append(page.Items, Item{Name: *bi.Name, Props: Props{
						LeaseState:    LeaseState(deref(p.LeaseState)),
						LeaseStatus:   LeaseStatus(deref(p.LeaseStatus)),
						LeaseDuration: LeaseDuration(deref(p.LeaseDuration)),
						ETag:          QuotedETag(deref(p.ETag)),
						LastModified:  deref(p.LastModified),
						Metadata:      bi.Metadata,
						Received:      received,
					}})
				}
			}
			if !yield(page, nil) {
				return
			}
		}
	}
}

// QuotedETag is etag in the form the blob service's headers use, quoted:
// List Blobs returns ETags without the quotes (so does Azurite, to match),
// and an ETag from a listing is compared with, and sent back as, a header's.
// A quoted or weak ETag, or "", is returned as it is.
func QuotedETag(etag azcore.ETag) azcore.ETag {
	if e := string(etag); e != "" && !strings.HasPrefix(e, `"`) && !strings.HasPrefix(e, `W/`) {
		return azcore.ETag(`"` + e + `"`)
	}
	return etag
}
