package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A ShardOwner's blobs are <prefix>/sessions/<ID> and <prefix>/shards/<name>
// (the library's session.go), and their leases follow its rules, not a
// mutex's: a session's ETag lease is broken by the surviving instances
// themselves, by the silence rule; a shard's lease is infinite and never
// renewed, so its ETag stands still while its func runs, and it passes on
// only when its session ends. leaderctl explains them, and never breaks them.
//
// Beside them lie two kinds of blob that are no leases at all, only hints:
// <prefix>/held/<session>, the list of the shards a session holds, which
// the survivors read when it dies (the library's heldlist.go); and
// <prefix>/handoff/<receiver>/<giver>-0, a note of the shards one session
// handed to another (handoff.go). leaderctl reads and explains them (see
// heldlist.go and handoff.go here), and never breaks or repairs them.

// ownerBlob is where a blob lies among a ShardOwner's blobs.
type ownerBlob struct {
	prefix string // the ShardOwner's prefix: its BlobSettings.Blob
	role   leaderelection.BlobRole
	// name is what follows the role's directory: the session's ID, the
	// shard's name, the session whose held list it is, or a note's
	// "<receiver>/<giver>-<part>".
	name string
}

// ownerDirs are the directories under a ShardOwner's prefix, by role: the
// segments the library reserves (its checkOwnName).
var ownerDirs = map[string]leaderelection.BlobRole{
	strings.TrimSuffix(wire.SessionsDir, "/"): leaderelection.RoleSession,
	strings.TrimSuffix(wire.ShardsDir, "/"):   leaderelection.RoleShard,
	strings.TrimSuffix(wire.HeldDir, "/"):     leaderelection.RoleHeld,
	strings.TrimSuffix(wire.HandoffDir, "/"):  leaderelection.RoleHandoff,
}

// ownerLayouts are the names the library gives each role's blobs, for
// messages about a blob whose name does not fit its role.
var ownerLayouts = map[leaderelection.BlobRole]string{
	leaderelection.RoleSession: "<prefix>/sessions/<ID>",
	leaderelection.RoleShard:   "<prefix>/shards/<name>",
	leaderelection.RoleHeld:    "<prefix>/held/<session>",
	leaderelection.RoleHandoff: "<prefix>/handoff/<receiver session>/<giver session>-0",
}

// parseOwnerBlob finds the ShardOwner a blob's name puts it under: the first
// segment after the first that is "sessions", "shards", "held" or
// "handoff". The library refuses a prefix with such a segment after its
// first, so the first one found is the owner's directory; a shard's name
// may hold more.
func parseOwnerBlob(blob string) (ownerBlob, bool) {
	segs := strings.Split(blob, "/")
	for i := 1; i < len(segs)-1; i++ {
		if role, ok := ownerDirs[segs[i]]; ok {
			return ownerBlob{prefix: strings.Join(segs[:i], "/"), role: role, name: strings.Join(segs[i+1:], "/")}, true
		}
	}
	return ownerBlob{}, false
}

// ownerOf is the ShardOwner blob of the given role named blob; false if the
// name does not fit the role: it lies in another role's directory, or, for
// a held list or a note, its name after the directory is not one the
// library writes there.
func ownerOf(role leaderelection.BlobRole, blob string) (ownerBlob, bool) {
	ob, ok := parseOwnerBlob(blob)
	if !ok || ob.role != role {
		return ownerBlob{}, false
	}
	switch role {
	case leaderelection.RoleHeld:
		ok = !strings.Contains(ob.name, "/")
	case leaderelection.RoleHandoff:
		_, ok = parseNoteName(ob.name)
	}
	return ob, ok
}

// isOwnerRole reports whether role is a ShardOwner's: a session or a shard.
func isOwnerRole(role leaderelection.BlobRole) bool {
	return role == leaderelection.RoleSession || role == leaderelection.RoleShard
}

// isHintRole reports whether role is a ShardOwner's held list or handoff
// note: a blob that is no lease, only a hint.
func isHintRole(role leaderelection.BlobRole) bool {
	return role == leaderelection.RoleHeld || role == leaderelection.RoleHandoff
}

// describeRole says what the blob is for, by its role and its name:
// `shard "s2" of the ShardOwner with prefix "jobs"`.
func describeRole(role leaderelection.BlobRole, blob string) string {
	switch role {
	case leaderelection.RoleMutex:
		return "mutex (a BlobDistributedMutex's lease)"
	case leaderelection.RoleSession, leaderelection.RoleShard:
		if ob, ok := ownerOf(role, blob); ok {
			return fmt.Sprintf("%s %q of the ShardOwner with prefix %q", role, ob.name, ob.prefix)
		}
		return fmt.Sprintf("a ShardOwner's %s, though its name is not %s", role, ownerLayouts[role])
	case leaderelection.RoleHeld:
		if ob, ok := ownerOf(role, blob); ok {
			return fmt.Sprintf("held list of session %q of the ShardOwner with prefix %q", ob.name, ob.prefix)
		}
		return "a ShardOwner's held list, though its name is not " + ownerLayouts[role]
	case leaderelection.RoleHandoff:
		if ob, ok := ownerOf(role, blob); ok {
			n, _ := parseNoteName(ob.name)
			return fmt.Sprintf("handoff note from session %q to session %q of the ShardOwner with prefix %q", n.giver, n.receiver, ob.prefix)
		}
		return "a ShardOwner's handoff note, though its name is not " + ownerLayouts[role]
	case "":
		s := "none recorded (written before roles, or by another tool): read as a mutex's"
		if ob, ok := parseOwnerBlob(blob); ok {
			s += fmt.Sprintf("; its name puts it among the blobs of the ShardOwner with prefix %q", ob.prefix)
		}
		return s
	}
	return fmt.Sprintf("%q, which this leaderctl does not know", string(role))
}

// shardSession is what the ShardOwner's listing says of the session a
// shard's record names (the metadata key leadersession).
type shardSession struct {
	id       string // "" if the record names none
	listed   bool   // the session's blob was among those listed
	live     bool   // its lease is held and it has written its record
	identity string // the instance that runs it
	err      error  // the listing failed: the rest is unknown
}

// lookupShard lists the ShardOwner's sessions and shards (ShardOwner.Inspect:
// two or more requests, the shards 1,000 a page) to find the session that
// shard ob's record names. A LeaseInfo does not carry it.
func (c *cli) lookupShard(ctx context.Context, l *session, ob ownerBlob) shardSession {
	o, err := newInspector(l.settingsFor(ob.prefix))
	if err != nil {
		return shardSession{err: err}
	}
	var info leaderelection.ShardsInfo
	if err := l.call(ctx, func(ctx context.Context) (err error) {
		info, err = o.Inspect(ctx)
		return err
	}); err != nil {
		return shardSession{err: err}
	}
	var out shardSession
	for _, sh := range info.Shards {
		if sh.Name == ob.name {
			out.id = sh.Session
		}
	}
	for _, se := range info.Sessions {
		if out.id != "" && se.ID == out.id {
			out.listed, out.live, out.identity = true, se.Live, se.Identity
		}
	}
	return out
}

// describeShardSession is the session line of a shard's status.
func describeShardSession(ss shardSession, held bool) string {
	switch {
	case ss.err != nil:
		return "unknown: listing the ShardOwner's blobs failed: " + strings.TrimPrefix(ss.err.Error(), "leaderelection: ")
	case ss.id == "" && held:
		return "none recorded (its holder has not written its record yet)"
	case ss.id == "":
		return "none recorded"
	case !held:
		return ss.id + " (its last holder; the shard is free: the instance below its share takes it)"
	case ss.live:
		return fmt.Sprintf("%s (live, run by %s): the shard is its own while it lives", ss.id, ss.identity)
	case ss.listed:
		return ss.id + " (ended: its lease is not held): the shard is free to take, and the survivors take it"
	}
	return ss.id + " (ended: its blob is gone): the shard is free to take, and the survivors take it"
}

// sessionLive is whether a session's own blob shows it live, as the
// library's listing judges it: its lease is held, it has written its
// record, and its record does not say it ended (a session so marked is dead
// for good, whatever its lease shows).
func sessionLive(info leaderelection.LeaseInfo) bool {
	return info.State == lease.StateTypeLeased && info.Leader.Identity != "" && info.LeaderEnded.IsZero()
}

// holderName is who holds a lease by its record, for advice to stop or
// restart it.
func holderName(info leaderelection.LeaseInfo) string {
	if info.Held() && !info.TermPending() && info.Leader.Identity != "" {
		return info.Leader.Identity
	}
	return "its holder has not recorded who it is"
}

// sessionLook is what a session's own blob says of it.
type sessionLook struct {
	id       string
	exists   bool   // its blob exists: it has not ended and been collected
	live     bool   // its lease is held and it has written its record
	identity string // the instance that runs it, by its record
	err      error  // the read failed: the rest is unknown
}

// lookupSession reads the blob of session id under prefix: one request.
func (c *cli) lookupSession(ctx context.Context, l *session, prefix, id string) sessionLook {
	out := sessionLook{id: id}
	m, err := leaderelection.NewBlobLeaseManager(l.settingsFor(wire.SessionBlob(prefix+"/", id)), leaderelection.WithLogger(nil))
	if err != nil {
		out.err = err
		return out
	}
	defer m.CloseIdleConnections()
	var info leaderelection.LeaseInfo
	out.err = l.call(ctx, func(ctx context.Context) (err error) {
		info, err = m.Inspect(ctx)
		return err
	})
	out.exists, out.live, out.identity = info.Exists, sessionLive(info), info.Leader.Identity
	return out
}

// describeLook is a session's state on one line, then what follows from
// it: live, dead and gone say what becomes of a hint while the session
// lives, once it is dead, and once its blob is gone ("": nothing said).
func describeLook(sl sessionLook, live, dead, gone string) string {
	then := func(s string) string {
		if s == "" {
			return ""
		}
		return ": " + s
	}
	switch {
	case sl.err != nil:
		return fmt.Sprintf("%s (unknown: reading its blob failed: %s)", sl.id, strings.TrimPrefix(sl.err.Error(), "leaderelection: "))
	case sl.live:
		return fmt.Sprintf("%s (live, run by %s)%s", sl.id, sl.identity, then(live))
	case sl.exists:
		return fmt.Sprintf("%s (dead: its lease is not held)%s", sl.id, then(dead))
	}
	return fmt.Sprintf("%s (ended: its blob is gone)%s", sl.id, then(gone))
}
