// Command listprobe measures how listings of a large prefix delay other
// requests on one Azurite: writes' latency while listers page through
// 10,000 blobs with metadata, by page size. With -perrequest, it measures
// Azurite's CPU per request of each kind a ShardOwner fleet sends in its
// steady state, beside that many shard blobs. With -steady, it measures
// instead what a ShardOwner fleet's steady state costs Azurite beside that
// many shard blobs: the sessions' listings and renewals alone, at the
// fleet's rates, and Azurite's CPU over them.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/procstat"
)

func main() {
	n := flag.Int("blobs", 10000, "blobs")
	listers := flag.Int("listers", 3, "concurrent listers")
	workers := flag.Int("workers", 32, "writers in flight")
	dur := flag.Duration("for", 6*time.Second, "each phase")
	steady := flag.Int("steady", 0, "instances whose steady state to play (sessions listed every 2 s, renewed every 5 s, each), instead of the listing phases")
	perRequest := flag.Int("perrequest", 0, "requests of each kind a fleet's steady state sends, to measure Azurite's CPU per request of that kind, instead of the listing phases")
	windows := flag.Int("windows", 1, "with -steady: windows of -for to measure one after another (Azurite may take a while to settle after the blobs are written)")
	rate := flag.Float64("rate", 0, "with -perrequest: requests a second, one at a time, as a fleet sends them (0: four at a time, as fast as Azurite answers)")
	flag.Parse()
	ctx := context.Background()
	srv, err := azurite.Start(ctx, azurite.Options{KeepAlive: 4 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	cc, err := container.NewClientFromConnectionString(azurite.ConnectionStringFor(srv.URL()), "probe", nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := cc.Create(ctx, nil); err != nil {
		log.Fatal(err)
	}
	md := func(i int) map[string]*string {
		v := func(s string) *string { return &s }
		return map[string]*string{"leaderterm": v(fmt.Sprint(i)), "leaderidentity": v("instance-07"), "leadersession": v("c96f0cba-ff7e-4c9f-8a92-818c89139eb7"),
			"leaderclaimgen": v("1"), "leadersince": v(time.Now().UTC().Format(time.RFC3339Nano)), "leaderleaseduration": v("-1s"), "leaderrole": v("shard")}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range *n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/shards/shard-%05d", i)).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md(i)}); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	if *steady > 0 {
		for w := range *windows {
			if w == 0 {
				writeSessions(ctx, cc, *steady)
			}
			steadyMix(ctx, srv, cc, *steady, *n, *dur)
		}
		return
	}
	if *perRequest > 0 {
		costPerRequest(ctx, srv, cc, *perRequest, *n, *rate)
		return
	}
	phase := func(name, prefix string, page int32, pause time.Duration) {
		pctx, cancel := context.WithTimeout(ctx, *dur)
		defer cancel()
		var lwg sync.WaitGroup
		var lists, pages atomic.Int64
		var listTook []time.Duration
		var mu sync.Mutex
		for range *listers {
			if page == 0 {
				break
			}
			lwg.Add(1)
			go func() {
				defer lwg.Done()
				for pctx.Err() == nil {
					start := time.Now()
					p := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, MaxResults: &page, Include: container.ListBlobsInclude{Metadata: true}})
					for p.More() {
						if _, err := p.NextPage(pctx); err != nil {
							return
						}
						pages.Add(1)
						if pause > 0 {
							time.Sleep(pause)
						}
					}
					lists.Add(1)
					mu.Lock()
					listTook = append(listTook, time.Since(start))
					mu.Unlock()
				}
			}()
		}
		var lat []time.Duration
		var wwg sync.WaitGroup
		for range *workers {
			wwg.Add(1)
			go func() {
				defer wwg.Done()
				for pctx.Err() == nil {
					i := rand.IntN(*n)
					start := time.Now()
					_, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/shards/shard-%05d", i)).SetMetadata(pctx, md(i), nil)
					if err != nil {
						continue
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					mu.Unlock()
				}
			}()
		}
		wwg.Wait()
		lwg.Wait()
		slices.Sort(lat)
		slices.Sort(listTook)
		q := func(v []time.Duration, f float64) time.Duration {
			if len(v) == 0 {
				return 0
			}
			return v[min(len(v)-1, int(f*float64(len(v))))]
		}
		fmt.Printf("%-28s writes %5d (%4.0f/s) p50 %6.1fms p99 %7.1fms max %7.1fms | full listings %d (p50 %v) pages %d\n", name, len(lat), float64(len(lat))/dur.Seconds(),
			ms(q(lat, .5)), ms(q(lat, .99)), ms(q(lat, 1)), lists.Load(), q(listTook, .5).Round(time.Millisecond), pages.Load())
	}
	for range 2 {
		phase("no listing", "", 0, 0)
		phase("pages of 1000", "bench/shards/", 1000, 0)
		phase("pages of 100", "bench/shards/", 100, 0)
		phase("pages of 5000", "bench/shards/", 5000, 0)
		// A prefix under which nothing lies (a session's notes, mostly):
		// Azurite still scans the container for it.
		phase("an empty prefix", "bench/handoff/none/", 1000, 0)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// steadyMix plays the requests a ShardOwner fleet of n instances makes in
// its steady state, on the n session blobs writeSessions wrote: each instance
// lists the sessions (with metadata) every 2 s and rewrites its record every
// 5 s, spread evenly. It prints Azurite's CPU over d, as a share of a core,
// and over as long before with no request at all.
func steadyMix(ctx context.Context, srv *azurite.Server, cc *container.Client, n, blobs int, d time.Duration) {
	md := sessionMetadata()
	cpu := func() time.Duration {
		c, err := procstat.CPU(srv.PID())
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	share := func(c time.Duration) float64 { return 100 * c.Seconds() / d.Seconds() }
	idle := cpu()
	time.Sleep(d)
	idleCPU := cpu() - idle
	prefix := "bench/sessions/"
	every := func(interval time.Duration, fn func()) {
		t := time.NewTicker(interval)
		defer t.Stop()
		end := time.After(d)
		for {
			select {
			case <-end:
				return
			case <-t.C:
				go fn()
			}
		}
	}
	var lists, writes atomic.Int64
	start := cpu()
	var wg sync.WaitGroup
	wg.Go(func() {
		every(2*time.Second/time.Duration(n), func() {
			p := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
			for p.More() {
				if _, err := p.NextPage(ctx); err != nil {
					return
				}
			}
			lists.Add(1)
		})
	})
	var turn atomic.Int64
	wg.Go(func() {
		every(5*time.Second/time.Duration(n), func() {
			i := int(turn.Add(1)) % n
			if _, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/sessions/s%02d", i)).SetMetadata(ctx, md, nil); err == nil {
				writes.Add(1)
			}
		})
	})
	wg.Wait()
	busy := cpu() - start
	fmt.Printf("%d instances' steady state beside %d blobs, over %v: %d listings, %d record writes; Azurite %.1f %% of a core (%.1f %% with no request)\n",
		n, blobs, d, lists.Load(), writes.Load(), share(busy), share(idleCPU))
}

// sessionMetadata is a session record's metadata, as a ShardOwner writes it.
func sessionMetadata() map[string]*string {
	v := func(s string) *string { return &s }
	return map[string]*string{"leaderrole": v("session"), "leaderowned": v("1000"), "leaderset": v("0123456789abcdef"), "leadersetcount": v("10000"),
		"leaderhanding": v("0"), "leaderterm": v("1"), "leaderidentity": v("instance-07"), "leadersince": v(time.Now().UTC().Format(time.RFC3339Nano)), "leaderleaseduration": v("15s")}
}

// writeSessions writes n session blobs under bench/sessions/.
func writeSessions(ctx context.Context, cc *container.Client, n int) {
	md := sessionMetadata()
	for i := range n {
		if _, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/sessions/s%02d", i)).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md}); err != nil {
			log.Fatal(err)
		}
	}
}

// costPerRequest sends k requests of each kind a fleet's steady state sends
// (beside 11 session blobs under bench/sessions/), four at a time, and
// prints Azurite's CPU per request of each kind: a listing of the sessions
// (with metadata), a session's lease renewal, its record's rewrite, and a
// read of one blob's properties.
func costPerRequest(ctx context.Context, srv *azurite.Server, cc *container.Client, k, blobs int, rate float64) {
	const sessions = 11
	md := sessionMetadata()
	var leases []*lease.BlobClient
	for i := range sessions {
		bc := cc.NewBlockBlobClient(fmt.Sprintf("bench/sessions/s%02d", i))
		if _, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md}); err != nil {
			log.Fatal(err)
		}
		lc, err := lease.NewBlobClient(bc, nil)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := lc.AcquireLease(ctx, 60, nil); err != nil {
			log.Fatal(err)
		}
		leases = append(leases, lc)
	}
	prefix := "bench/sessions/"
	kinds := []struct {
		name string
		do   func(i int) error
	}{
		{"list the sessions", func(int) error {
			p := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
			for p.More() {
				if _, err := p.NextPage(ctx); err != nil {
					return err
				}
			}
			return nil
		}},
		{"renew a session's lease", func(i int) error {
			_, err := leases[i%sessions].RenewLease(ctx, nil)
			return err
		}},
		{"rewrite a session's record", func(i int) error {
			id := leases[i%sessions].LeaseID()
			_, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/sessions/s%02d", i%sessions)).SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: id}}})
			return err
		}},
		{"read a shard's properties", func(i int) error {
			_, err := cc.NewBlockBlobClient(fmt.Sprintf("bench/shards/shard-%05d", i%blobs)).GetProperties(ctx, nil)
			return err
		}},
	}
	// The first round warms Azurite up (its code is compiled as it runs);
	// the second is the one to read.
	for round := 1; round <= 2; round++ {
		if rate > 0 {
			// Azurite's own CPU with no request, over as long as each kind
			// takes at that rate.
			measureKind(srv, round, blobs, k, rate, "no request", func(int) error { return nil })
		}
		for _, kind := range kinds {
			measureKind(srv, round, blobs, k, rate, kind.name, kind.do)
		}
	}
}

// measureKind sends k requests by do (four at a time, or one at a time at
// rate a second, if rate > 0), and prints Azurite's CPU per request.
func measureKind(srv *azurite.Server, round, blobs, k int, rate float64, name string, do func(int) error) {
	before, err := procstat.CPU(srv.PID())
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		for i := 1; i <= k; i++ {
			<-t.C
			if err := do(i); err != nil {
				log.Fatalf("%s: %v", name, err)
			}
		}
		t.Stop()
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := int(next.Add(1)); i <= k; i = int(next.Add(1)) {
					if err := do(i); err != nil {
						log.Fatalf("%s: %v", name, err)
					}
				}
			})
		}
		wg.Wait()
	}
	took := time.Since(start)
	after, err := procstat.CPU(srv.PID())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("round %d, beside %5d blobs: %-28s Azurite %6.3f ms of CPU a request (%d requests in %v)\n", round, blobs, name, ms((after-before)/time.Duration(k)), k, took.Round(time.Millisecond))
}
