package etcdpeer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/reqcount"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config configures Contend.
type Config struct {
	Endpoint string        // the etcd server's client address, host:port
	Prefix   string        // the election's key prefix
	Name     string        // the value this contender campaigns with
	TTL      time.Duration // the session's lease TTL, whole seconds
	// Lead runs while this contender leads, and must return once ctx is
	// done: when the session ends (its lease expired, as far as the client
	// can tell) or Contend's ctx does. rev is the leader key's creation
	// revision, which only grows: etcd's fencing token. couldExpire returns
	// the earliest moment the server could expire the session's lease: the
	// send time of the last grant or keepalive it answered, + TTL.
	Lead  func(ctx context.Context, rev int64, couldExpire func() time.Time)
	Meter *Meter // counts the requests; nil counts nothing
	Log   *zap.Logger
}

// Contend runs etcd's election until ctx is done: a session (a lease of
// TTL, kept alive by the client every TTL/3), Campaign, Lead while the
// session lives, then a new session. When ctx ends while it leads, it
// resigns (deletes its key: the next contender's Campaign returns at once)
// and revokes the lease, as a service shutting down would.
func Contend(ctx context.Context, cfg Config) error {
	if cfg.Meter == nil {
		cfg.Meter = &Meter{}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.Endpoint},
		DialTimeout: 2 * time.Second,
		DialOptions: cfg.Meter.dialOptions(),
		Logger:      cfg.Log,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	for ctx.Err() == nil {
		if err := term(ctx, cli, cfg); err != nil && ctx.Err() == nil {
			cfg.Log.Warn("etcdpeer: campaign failed; trying again in 1 s", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// term is one session: campaign, and lead while the session lives.
func term(ctx context.Context, cli *clientv3.Client, cfg Config) error {
	ttl := int64(cfg.TTL / time.Second)
	// The grant is bounded, so that a contender cut off from etcd tries
	// again once it can reach it; the session then lives on ctx.
	gctx, cancel := context.WithTimeout(ctx, cfg.TTL)
	g, err := cli.Grant(gctx, ttl)
	cancel()
	if err != nil {
		return err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(ttl)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() {
		// Revoke the lease (bounded by the TTL), so that nothing of this
		// session lingers.
		_ = s.Close()
	}()
	// Campaign and lead under a context that ends with the session: a
	// campaign must not win on a lease that has already expired, and a
	// leader must stop when its session ends. That is how etcd's own
	// documentation has a leader learn it lost: Session.Done.
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-s.Done():
		case <-lctx.Done():
		}
		stop()
	}()
	e := concurrency.NewElection(s, cfg.Prefix)
	if err := e.Campaign(lctx, cfg.Name); err != nil {
		return err
	}
	if lctx.Err() != nil {
		return nil
	}
	lease := s.Lease()
	cfg.Lead(lctx, e.Rev(), func() time.Time { return cfg.Meter.couldExpire(int64(lease), cfg.TTL) })
	if ctx.Err() != nil {
		// Shutting down: hand over at once.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return e.Resign(rctx)
	}
	select {
	case <-s.Done():
		return nil // the session ended: campaign again on a new one
	default:
		return errors.New("etcdpeer: Lead returned while the session lived")
	}
}

// Meter counts a client's gRPC requests by class, the way reqcount counts
// an Azure client's: lease operations (grant, keepalive, revoke), writes
// (put, delete, txn) and reads (range, and each watch created; events are
// pushed, and not counted). It also times the lease: for each lease ID,
// the send time of the last grant or keepalive the server answered.
type Meter struct {
	lease, write, read atomic.Int64

	mu        sync.Mutex
	confirmed map[int64]time.Time
}

// Counts is how many requests of each class have been sent so far.
func (m *Meter) Counts() reqcount.Counts {
	return reqcount.Counts{Lease: m.lease.Load(), Write: m.write.Load(), Read: m.read.Load()}
}

func (m *Meter) confirm(id int64, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.confirmed == nil {
		m.confirmed = map[int64]time.Time{}
	}
	if sent.After(m.confirmed[id]) {
		m.confirmed[id] = sent
	}
}

// couldExpire is the earliest moment the server could expire lease id: the
// server sets a lease's expiry to TTL after it processes a grant or a
// keepalive, which is after the client sent it. Zero if none was answered.
func (m *Meter) couldExpire(id int64, ttl time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.confirmed[id]; ok {
		return t.Add(ttl)
	}
	return time.Time{}
}

func (m *Meter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(m.unary),
		grpc.WithChainStreamInterceptor(m.stream),
	}
}

// unary counts a call; a grant the server answered starts its lease's clock.
func (m *Meter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case "/etcdserverpb.Lease/LeaseGrant", "/etcdserverpb.Lease/LeaseRevoke", "/etcdserverpb.Lease/LeaseTimeToLive", "/etcdserverpb.Lease/LeaseLeases":
		m.lease.Add(1)
	case "/etcdserverpb.KV/Range":
		m.read.Add(1)
	default:
		m.write.Add(1)
	}
	sent := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if g, ok := reply.(*pb.LeaseGrantResponse); ok && err == nil && g.Error == "" {
		m.confirm(g.ID, sent)
	}
	return err
}

// stream counts the messages a client sends on the keepalive and watch
// streams, and pairs each keepalive answer with its request.
func (m *Meter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return cs, err
	}
	return &meteredStream{ClientStream: cs, m: m}, nil
}

type meteredStream struct {
	grpc.ClientStream
	m       *Meter
	mu      sync.Mutex
	pending map[int64][]time.Time // keepalives sent and not yet answered, by lease ID, oldest first
}

func (s *meteredStream) SendMsg(msg any) error {
	switch r := msg.(type) {
	case *pb.LeaseKeepAliveRequest:
		s.m.lease.Add(1)
		s.mu.Lock()
		if s.pending == nil {
			s.pending = map[int64][]time.Time{}
		}
		s.pending[r.ID] = append(s.pending[r.ID], time.Now())
		s.mu.Unlock()
	case *pb.WatchRequest:
		if r.GetCreateRequest() != nil {
			s.m.read.Add(1)
		}
	}
	return s.ClientStream.SendMsg(msg)
}

// RecvMsg pairs a keepalive answer with the oldest unanswered request for
// its lease (the server answers a stream's keepalives in order); an answer
// with a TTL renewed the lease when that request was processed.
func (s *meteredStream) RecvMsg(msg any) error {
	err := s.ClientStream.RecvMsg(msg)
	if r, ok := msg.(*pb.LeaseKeepAliveResponse); ok && err == nil {
		s.mu.Lock()
		q := s.pending[r.ID]
		var sent time.Time
		if len(q) > 0 {
			sent, s.pending[r.ID] = q[0], q[1:]
		}
		s.mu.Unlock()
		if !sent.IsZero() && r.TTL > 0 {
			s.m.confirm(r.ID, sent)
		}
	}
	return err
}
