package etcdpeer

import (
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/reqcount"
	"github.com/stretchr/testify/assert"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// fakeStream answers RecvMsg from a script; SendMsg accepts anything.
type fakeStream struct {
	grpc.ClientStream
	answers []*pb.LeaseKeepAliveResponse
}

func (f *fakeStream) SendMsg(any) error { return nil }
func (f *fakeStream) RecvMsg(m any) error {
	*m.(*pb.LeaseKeepAliveResponse) = *f.answers[0]
	f.answers = f.answers[1:]
	return nil
}

// A keepalive answer is paired with the oldest unanswered request for its
// lease, and the lease could expire TTL after that request was sent; an
// answer without a TTL (the lease is gone) extends nothing.
func TestMeterTimesTheLeaseFromTheAnsweredKeepalivesSendTime(t *testing.T) {
	m := &Meter{}
	fs := &fakeStream{answers: []*pb.LeaseKeepAliveResponse{{ID: 7, TTL: 5}, {ID: 7, TTL: 0}}}
	s := &meteredStream{ClientStream: fs, m: m}

	assert.True(t, m.couldExpire(7, 5*time.Second).IsZero(), "nothing answered yet")
	before := time.Now()
	assert.NoError(t, s.SendMsg(&pb.LeaseKeepAliveRequest{ID: 7}))
	time.Sleep(20 * time.Millisecond)
	assert.NoError(t, s.SendMsg(&pb.LeaseKeepAliveRequest{ID: 7}))
	second := time.Now()

	assert.NoError(t, s.RecvMsg(&pb.LeaseKeepAliveResponse{}))
	first := m.couldExpire(7, 5*time.Second)
	assert.False(t, first.Before(before.Add(5*time.Second)))
	assert.True(t, first.Before(second.Add(5*time.Second)), "paired with the first request, not the second")

	assert.NoError(t, s.RecvMsg(&pb.LeaseKeepAliveResponse{}))
	assert.Equal(t, first, m.couldExpire(7, 5*time.Second), "an answer without a TTL extends nothing")

	assert.NoError(t, s.SendMsg(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{}}}))
	assert.Equal(t, reqcount.Counts{Lease: 2, Read: 1}, m.Counts())
}
