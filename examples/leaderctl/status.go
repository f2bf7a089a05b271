package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection"
)

// statusCmd holds the flags of status.
type statusCmd struct {
	target
	json  bool
	watch time.Duration
}

func (cmd *statusCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cmd.register(fs)
	fs.BoolVar(&cmd.json, "json", false, "")
	fs.Var((*duration)(&cmd.watch), "watch", "")
	return fs
}

// watchEvery is how often status -watch reads the lease.
const watchEvery = 500 * time.Millisecond

// etagWatch is how the blob's ETag behaved over the answers status read:
// how long the current one has stood, as seen from here, and how often it
// changed (every renewal of an ETag lease changes it).
type etagWatch struct {
	etag    azcore.ETag
	since   time.Time // when the first answer that showed etag arrived
	first   time.Time // when the first answer arrived
	last    time.Time // when the last answer arrived
	changes int
}

func (w *etagWatch) see(info leaderelection.LeaseInfo) {
	if w.first.IsZero() {
		w.first = info.Received
	}
	w.last = info.Received
	if info.ETag != w.etag || w.since.IsZero() {
		if w.etag != "" {
			w.changes++
		}
		w.etag, w.since = info.ETag, info.Received
	}
}

// stood is how long the current ETag has stood, as seen from here.
func (w *etagWatch) stood() time.Duration { return w.last.Sub(w.since) }

// watched is how long status read the lease.
func (w *etagWatch) watched() time.Duration { return w.last.Sub(w.first) }

func (c *cli) status(ctx context.Context, args []string) int {
	var cmd statusCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, statusHelp, args); !ok {
		return code
	}
	// What a held list or a note says lies beyond the LeaseInfo: in its
	// metadata, and a held list's body (see blobPeek).
	peek := &blobPeek{body: true}
	cmd.peek = peek
	server := &serverView{}
	cmd.server = server
	l, code, ok := c.open(fs, &cmd.target)
	if !ok {
		return code
	}
	defer l.close()
	if ob, ok := parseOwnerBlob(l.manager.Settings().Blob); ok && ob.role == leaderelection.RoleHeld {
		peek.byName = true
	}

	var (
		info leaderelection.LeaseInfo
		w    etagWatch
	)
	read := func() error {
		server.begin()
		return l.call(ctx, func(ctx context.Context) (err error) {
			info, err = l.manager.Inspect(ctx)
			w.see(info)
			return err
		})
	}
	if err := read(); err != nil {
		return c.fail(err)
	}
	for end := time.Now().Add(cmd.watch); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return c.fail(ctx.Err())
		case <-time.After(min(watchEvery, time.Until(end))):
		}
		if err := read(); err != nil {
			return c.fail(err)
		}
	}
	s := l.manager.Settings()
	if !info.Exists && server.containerMissing() {
		// Not "nobody has contended for it": the library creates the
		// container when it first contends, so a missing one is most
		// likely a mistyped name.
		return c.fail(containerMissing(s.Container))
	}
	encode := func(out statusJSON) int {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	// A held list or a note is no lease: what it says, and the sessions
	// it names (one request each), are its status.
	switch hintKind(info, s.Blob) {
	case leaderelection.RoleHeld:
		v := newHeldView(info, s.Blob, peek.seen())
		if v.named {
			v.session = c.lookupSession(ctx, l, v.owner.prefix, v.owner.name)
		}
		if cmd.json {
			out := newStatusJSON(s.Container, s.Blob, info, w, shardSession{}, time.Now())
			out.addHeld(v)
			return encode(out)
		}
		printHeld(c.stdout, s.Container, s.Blob, info, v, time.Now())
		return exitOK
	case leaderelection.RoleHandoff:
		v := newNoteView(info, s.Blob, peek.seen())
		if v.named {
			v.from = c.lookupSession(ctx, l, v.owner.prefix, v.name.giver)
			v.to = c.lookupSession(ctx, l, v.owner.prefix, v.name.receiver)
		}
		if cmd.json {
			out := newStatusJSON(s.Container, s.Blob, info, w, shardSession{}, time.Now())
			out.addNote(v)
			return encode(out)
		}
		printNote(c.stdout, s.Container, s.Blob, info, v, time.Now())
		return exitOK
	}
	// A shard's record names the session that holds it, which only a
	// listing of its ShardOwner's blobs shows.
	var sh shardSession
	if ob, ok := ownerOf(info.Role, s.Blob); ok && ob.role == leaderelection.RoleShard {
		sh = c.lookupShard(ctx, l, ob)
	}
	if cmd.json {
		return encode(newStatusJSON(s.Container, s.Blob, info, w, sh, time.Now()))
	}
	printStatus(c.stdout, s.Container, s.Blob, info, w, sh, time.Now())
	return exitOK
}

// printStatus writes the lease's state for a person: the answer to "who
// leads?" first. sh is what the listing said of a shard's session.
func printStatus(w io.Writer, container, blob string, info leaderelection.LeaseInfo, watch etagWatch, sh shardSession, now time.Time) {
	name := container + "/" + blob
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	switch {
	case !info.Exists:
		line("leader", "no leader (lease blob does not exist yet: nobody has contended for it)")
		line("blob", "%s", name)
		return
	case info.Held() && info.Leader.Number == 0:
		line("leader", "unknown (the lease is held, but no leader has recorded its term)")
	case info.TermPending():
		line("leader", "unknown (the lease was taken, and its holder has not recorded its term yet)")
		line("previous", "%s, ended %s", describeTerm(info.Leader, now), ago(info.LeaderEnded, now))
	case info.Held():
		note := ""
		if info.State == lease.StateTypeBreaking {
			note = " (its lease is being broken: it stops leading)"
		}
		line("leader", "%s%s", info.Leader.Identity, note)
		line("term", "%d", info.Leader.Number)
		if !info.Leader.Since.IsZero() {
			line("since", "%s (%s)", info.Leader.Since.UTC().Format(time.RFC3339), ago(info.Leader.Since, now))
		}
		if info.Prioritized {
			line("priority", "%d (it hands the lease to a live contender of higher priority: WithPriority)", info.Priority)
		}
	default:
		line("leader", "no leader (the lease is %s)", info.State)
		if info.Leader.Number > 0 {
			ended := ""
			if !info.LeaderEnded.IsZero() {
				ended = ", ended " + ago(info.LeaderEnded, now)
			}
			line("previous", "%s%s", describeTerm(info.Leader, now), ended)
		}
		if info.HandedTo != "" {
			line("handed to", "%s (a preferred contender: the others leave the lease to it for a moment)", info.HandedTo)
		}
	}
	state := fmt.Sprintf("%s, %s", info.State, info.Status)
	if info.Duration != "" {
		state += ", " + string(info.Duration)
	}
	line("lease", "%s", state)
	line("role", "%s", describeRole(info.Role, blob))
	if info.Role == leaderelection.RoleShard {
		line("session", "%s", describeShardSession(sh, info.Held()))
	}
	switch {
	case info.Kind == "":
	case info.Role == leaderelection.RoleShard:
		// Not an ETag lease in the mutex's sense: nothing rewrites it, so
		// its ETag standing still says nothing about its holder.
		line("kind", "shard lease: infinite and never renewed (its ETag stands still while its func runs): no silence rule applies to it")
	case info.Role == leaderelection.RoleSession:
		line("kind", "session's ETag lease%s: its instance renews it by a write every RenewInterval, and runs its shards while it lives", declaredText(info))
		printETag(line, info, watch, now)
	case info.Kind == leaderelection.NativeLease:
		if info.DeclaredDuration > 0 {
			line("kind", "native lease%s: Azure expires it that long after its last renewal; followers never break it", declaredText(info))
		} else {
			line("kind", "native lease: Azure expires it 15s to 60s after its last renewal; followers never break it")
		}
	case info.Kind == leaderelection.ETagLease:
		if info.DeclaredDuration > 0 {
			line("kind", "ETag lease%s: a follower breaks it once its ETag has stood unchanged that long", declaredText(info))
		} else {
			line("kind", "ETag lease, no declared duration (its holder has not written): a follower breaks it after its own LeaseDuration of silence")
		}
		printETag(line, info, watch, now)
	}
	if isOwnerRole(info.Role) {
		line("break", "%s", ownerBreakText(info))
	}
	if p := recordProblem(info, container, blob); p != nil {
		line("record", "malformed: %s=%q %s", p.Key, p.Value, p.Rule)
		line("repair", "%s", repairAdvice(info, container, blob))
	}
	line("blob", "%s", name)
}

// printETag writes how an ETag lease's ETag behaved: every renewal changes
// it, and followers break the lease once it has stood for the declared
// duration.
func printETag(line func(label, format string, args ...any), info leaderelection.LeaseInfo, watch etagWatch, now time.Time) {
	stood := fmt.Sprintf("unchanged for %v, as seen from here", watch.stood().Round(100*time.Millisecond))
	switch {
	case watch.watched() == 0:
		stood += " (first seen now; -watch D measures it)"
	case watch.changes > 0:
		stood += fmt.Sprintf(" (watched %v: changed %d times, the holder is renewing)", watch.watched().Round(100*time.Millisecond), watch.changes)
	default:
		stood += fmt.Sprintf(" (watched %v: no renewal seen)", watch.watched().Round(100*time.Millisecond))
	}
	line("etag", "%s %s", info.ETag, stood)
	if !info.LastModified.IsZero() {
		line("written", "%s (%s, by the server's clock): the holder's last renewal", info.LastModified.UTC().Format(time.RFC3339), ago(info.LastModified, now))
	}
}

// ownerBreakText says why a ShardOwner's session's or shard's lease is
// never broken by hand, and what moves it instead.
func ownerBreakText(info leaderelection.LeaseInfo) string {
	const never = "never by hand (leaderctl break refuses it)"
	switch {
	case !info.Held():
		return never + "; nobody holds it now"
	case info.Role == leaderelection.RoleShard:
		return fmt.Sprintf("%s: it passes to another instance only when its session ends: stop or restart the instance that holds it (%s); "+
			"a dead session's shards are taken by the survivors within the session's lease duration", never, holderName(info))
	}
	return fmt.Sprintf("%s: the surviving instances break it themselves once its ETag has stood unchanged for the duration it declared; "+
		"to move its shards, stop or restart the instance that runs it (%s)", never, holderName(info))
}

// declaredText is ", declared 3m0s", or "" when the record declares none.
func declaredText(info leaderelection.LeaseInfo) string {
	if info.DeclaredDuration == 0 {
		return ""
	}
	return fmt.Sprintf(", declared %v", info.DeclaredDuration)
}

// statusJSON is what status -json prints.
type statusJSON struct {
	Container string `json:"container"`
	Blob      string `json:"blob"`
	Exists    bool   `json:"exists"` // false: the lease blob has not been created yet
	Held      bool   `json:"held"`   // someone leads: the lease is leased or breaking
	State     string `json:"state"`  // available, leased, expired, breaking or broken
	Status    string `json:"status"` // locked or unlocked
	Duration  string `json:"duration,omitempty"`
	// Kind is "native" or "etag" while someone holds the lease.
	Kind string `json:"kind,omitempty"`
	// DeclaredSeconds is the lease duration the leader's record declares.
	DeclaredSeconds float64 `json:"declaredSeconds,omitempty"`
	// ETag is the blob's ETag, which every renewal of an ETag lease changes;
	// ETagStoodSeconds how long it has stood, as seen from here (0 without
	// -watch), ETagChanges how often it changed while watched.
	ETag             string     `json:"etag,omitempty"`
	ETagStoodSeconds float64    `json:"etagStoodSeconds"`
	ETagChanges      int        `json:"etagChanges"`
	WatchedSeconds   float64    `json:"watchedSeconds"`
	LastModified     *time.Time `json:"lastModified,omitempty"` // the blob's last write, by the server's clock
	// Leader is the current leader, null when nobody holds the lease. Its
	// identity is empty and its term 0 if the holder has not recorded one.
	Leader *termJSON `json:"leader"`
	// LastLeader is the last recorded leader, when nobody holds the lease
	// or its holder has not recorded its term yet.
	LastLeader *termJSON `json:"lastLeader,omitempty"`
	// Role is what the blob says it is for: mutex, session, shard, held or
	// handoff; "" if it says nothing (read as a mutex's).
	Role string `json:"role"`
	// ShardOwner is set for a session's or a shard's blob, a held list or a
	// handoff note: which owner, and which session.
	ShardOwner *ownerJSON `json:"shardOwner,omitempty"`
	// HeldList is set for a held list (its role is held, or it says none and
	// its name is <prefix>/held/<session>): what it names, and whether it
	// reads whole.
	HeldList *heldJSON `json:"heldList,omitempty"`
	// Handoff is set for a handoff note (likewise, by its role or its
	// name): from whom to whom, and which shards.
	Handoff *handoffJSON `json:"handoff,omitempty"`
	// RecordError is set when the record does not read, or cannot be built
	// on: no term follows it until it is repaired.
	RecordError *recordErrorJSON `json:"recordError,omitempty"`
	// HandedTo is the contender an ended term handed the free lease to
	// (WithPriority): the others leave it to that one for a moment.
	HandedTo string `json:"handedTo,omitempty"`
}

type ownerJSON struct {
	Prefix string `json:"prefix"`          // the ShardOwner's prefix, from the blob's name
	Shard  string `json:"shard,omitempty"` // a shard's name
	// Session is a session's ID; for a shard, the session its record
	// names (the metadata key leadersession), "" if none; for a held list,
	// whose list it is (a note's sessions are in handoff).
	Session string `json:"session,omitempty"`
	// SessionLive: that session's lease is held and it has written its
	// record; null if unknown (the listing, or the read of its blob,
	// failed).
	SessionLive     *bool  `json:"sessionLive,omitempty"`
	SessionIdentity string `json:"sessionIdentity,omitempty"`
	ListError       string `json:"listError,omitempty"`    // for a shard: why the listing failed
	SessionError    string `json:"sessionError,omitempty"` // for a held list: why its session's blob could not be read
}

type recordErrorJSON struct {
	Key    string `json:"key"`    // the metadata key
	Value  string `json:"value"`  // its value as stored
	Rule   string `json:"rule"`   // what is wrong with it
	Repair string `json:"repair"` // the leaderctl repair to run
}

type termJSON struct {
	Identity   string     `json:"identity"`
	Term       int64      `json:"term"`
	Since      *time.Time `json:"since,omitempty"`      // UTC, by the leader's clock
	AgeSeconds *float64   `json:"ageSeconds,omitempty"` // now - since, by ours
	// Priority is what the leader declared with WithPriority: it hands the
	// lease to a live contender of strictly higher priority. Absent if it
	// declared none.
	Priority *int `json:"priority,omitempty"`
}

// newTermJSON is a term, its since and its age as now.
func newTermJSON(term leaderelection.Term, now time.Time) *termJSON {
	t := &termJSON{Identity: term.Identity, Term: term.Number}
	if since := term.Since; !since.IsZero() {
		since = since.UTC()
		age := now.Sub(since).Round(time.Millisecond).Seconds()
		t.Since, t.AgeSeconds = &since, &age
	}
	return t
}

func newStatusJSON(container, blob string, info leaderelection.LeaseInfo, w etagWatch, sh shardSession, now time.Time) statusJSON {
	out := statusJSON{
		Container: container, Blob: blob, Exists: info.Exists, Held: info.Held(),
		State: string(info.State), Status: string(info.Status), Duration: string(info.Duration),
		Kind: string(info.Kind), DeclaredSeconds: info.DeclaredDuration.Seconds(), ETag: string(info.ETag),
		ETagStoodSeconds: w.stood().Seconds(), ETagChanges: w.changes, WatchedSeconds: w.watched().Seconds(),
	}
	if !info.LastModified.IsZero() {
		lm := info.LastModified.UTC()
		out.LastModified = &lm
	}
	t := newTermJSON(info.Leader, now)
	if info.Prioritized {
		p := info.Priority
		t.Priority = &p
	}
	if !info.Held() {
		out.HandedTo = info.HandedTo
	}
	switch {
	case info.TermPending():
		out.Leader, out.LastLeader = &termJSON{}, t
	case info.Held():
		out.Leader = t
	case info.Leader.Number > 0:
		out.LastLeader = t
	}
	out.Role = string(info.Role)
	if ob, ok := ownerOf(info.Role, blob); ok {
		o := &ownerJSON{Prefix: ob.prefix}
		switch ob.role {
		case leaderelection.RoleShard:
			o.Shard, o.Session = ob.name, sh.id
			if sh.err != nil {
				o.ListError = sh.err.Error()
			} else if sh.id != "" {
				o.SessionLive, o.SessionIdentity = &sh.live, sh.identity
			}
		case leaderelection.RoleSession:
			live := sessionLive(info)
			o.Session, o.SessionLive, o.SessionIdentity = ob.name, &live, info.Leader.Identity
		}
		out.ShardOwner = o
	}
	if p := recordProblem(info, container, blob); p != nil {
		out.RecordError = &recordErrorJSON{Key: p.Key, Value: p.Value, Rule: p.Rule, Repair: repairAdvice(info, container, blob)}
	}
	return out
}

// addHeld adds what status read of a held list.
func (out *statusJSON) addHeld(v heldView) {
	out.HeldList = newHeldJSON(v)
	if !v.named {
		return
	}
	o := &ownerJSON{Prefix: v.owner.prefix, Session: v.owner.name}
	if err := v.session.err; err != nil {
		o.SessionError = strings.TrimPrefix(err.Error(), "leaderelection: ")
	} else {
		live := v.session.live
		o.SessionLive, o.SessionIdentity = &live, v.session.identity
	}
	out.ShardOwner = o
}

// addNote adds what status read of a handoff note.
func (out *statusJSON) addNote(v noteView) {
	out.Handoff = newHandoffJSON(v)
	if v.named {
		out.ShardOwner = &ownerJSON{Prefix: v.owner.prefix}
	}
}
