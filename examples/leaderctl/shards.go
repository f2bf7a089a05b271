package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/wire"
)

// shardsCmd holds the flags of shards.
type shardsCmd struct {
	target
	json     bool
	each     bool // -shards: list every shard blob
	watch    bool
	interval time.Duration
}

func (cmd *shardsCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("shards", flag.ContinueOnError)
	cmd.prefix = true
	cmd.register(fs)
	fs.BoolVar(&cmd.json, "json", false, "")
	fs.BoolVar(&cmd.each, "shards", false, "")
	fs.BoolVar(&cmd.watch, "watch", false, "")
	cmd.interval = 5 * time.Second
	fs.Var((*duration)(&cmd.interval), "interval", "")
	return fs
}

// unownedShown is how many unowned shards the text names: there may be
// thousands, and -shards or -json lists them all.
const unownedShown = 20

// shards shows a ShardOwner's prefix as one listing (ShardOwner.Inspect)
// sees it: its sessions, who holds each shard, the spread, and the shards
// no live session holds. It reads, and holds or breaks nothing.
func (c *cli) shards(ctx context.Context, args []string) int {
	var cmd shardsCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, shardsHelp, args); !ok {
		return code
	}
	if cmd.watch && cmd.interval <= 0 {
		return c.usageError(fs.Name(), fmt.Sprintf("-interval must be positive, got %v", cmd.interval))
	}
	server := &serverView{}
	cmd.server = server
	l, code, ok := c.open(fs, &cmd.target)
	if !ok {
		return code
	}
	defer l.close()
	// A ShardOwner's prefix has rules of its own (no segment named sessions
	// or shards after the first): name where it came from.
	origin := map[string]string{"Blob": "LEASE_PREFIX"}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "prefix" {
			origin["Blob"] = "-prefix"
		}
	})
	s := l.manager.Settings()
	server.sessions = s.Blob + "/" + wire.SessionsDir // the library's <prefix>/sessions/
	o, err := newInspector(s)
	if err != nil {
		if problems := settingsProblems(err, origin); problems != nil {
			return c.usageError(fs.Name(), problems...)
		}
		return c.fail(err)
	}
	lists := newListReader(l, s)
	printed := false // a text report was printed: the next is set apart
	show := func() error {
		var info leaderelection.ShardsInfo
		server.begin()
		if err := l.call(ctx, func(ctx context.Context) (err error) {
			info, err = o.Inspect(ctx)
			return err
		}); err != nil {
			return err
		}
		if server.containerMissing() {
			// The library lists a missing container as an empty one.
			return containerMissing(s.Container)
		}
		counts := lists.read(ctx, info.Sessions)
		r := newShardsReport(s.Container, s.Blob, info, time.Now(), server.listedAt())
		r.addLists(counts)
		if cmd.json {
			enc := json.NewEncoder(c.stdout)
			if !cmd.watch {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(r)
		}
		if printed {
			fmt.Fprintln(c.stdout)
		}
		printShards(c.stdout, r, cmd.each)
		printed = true
		return nil
	}
	if !cmd.watch {
		if err := show(); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	// Until interrupted: a listing that fails is reported, and the next
	// one tried, since an operator watching wants to see the fleet again
	// once storage answers. The exit code is the last listing's.
	code = exitOK
	for {
		err := show()
		switch {
		case ctx.Err() != nil:
			return code
		case err != nil:
			code = c.fail(err)
		default:
			code = exitOK
		}
		select {
		case <-ctx.Done():
			return code
		case <-time.After(cmd.interval):
		}
	}
}

// newInspector is a ShardOwner for the prefix s.Blob with no shards, to
// list with Inspect; it is never Run, and it holds nothing. Its transport is
// the library's own, whose idle connections Inspect closes when Run is not
// running: none outlives a listing.
func newInspector(s leaderelection.BlobSettings) (*leaderelection.ShardOwner, error) {
	return leaderelection.NewShardOwner(s, nil, func(context.Context, string) error {
		return errors.New("leaderctl never runs a shard")
	}, leaderelection.WithLogger(nil), leaderelection.WithIdentity("leaderctl"))
}

// Shard states in a shards report.
const (
	shardOwned = "owned" // held by a live session
	shardFree  = "free"  // its lease is not held
	// its lease is held, by a session that is not live (its lease ended,
	// its blob is gone, or the record names none): free to take
	shardDeadHolder = "deadHolder"
	// its lease is held by a silent session (see sessionReport.Silent):
	// its func does not run, and a live session of its set takes it once
	// that session's lease is broken
	shardSilentHolder = "silentHolder"
)

// shardsReport is what shards prints, and with -json its structure: one
// listing of a ShardOwner's prefix. Field names are stable; new ones may be
// added.
type shardsReport struct {
	Container string    `json:"container"`
	Prefix    string    `json:"prefix"`
	Listed    time.Time `json:"listed"` // when the listing ended, UTC, by our clock
	// ServerDate is the server's clock when it listed the sessions (its
	// answer's Date), against which their silence is judged; null if the
	// answer gave none, and then it is judged by our clock (Listed).
	ServerDate *time.Time `json:"serverDate,omitempty"`
	// LiveSessions, SilentSessions and DeadSessions count the session
	// blobs: live, its lease is held, it has written its record and it has
	// not been silent; silent, the same but not written for longer than the
	// lease duration it declared; dead, the rest.
	LiveSessions   int             `json:"liveSessions"`
	SilentSessions int             `json:"silentSessions"`
	DeadSessions   int             `json:"deadSessions"`
	Sessions       []sessionReport `json:"sessions"` // sorted by ID
	Sets           []setReport     `json:"sets"`     // the live sessions' sets, sorted by digest
	Spread         *spreadReport   `json:"spread"`   // null with no live session
	ShardBlobs     int             `json:"shardBlobs"`
	Unowned        unownedReport   `json:"unowned"`
	Shards         []shardReport   `json:"shards"` // every shard blob, sorted by name
}

type sessionReport struct {
	ID       string `json:"id"`
	Identity string `json:"identity"` // the instance that runs it
	Live     bool   `json:"live"`     // false if Silent
	// Silent: its lease is held and it has written its record, but not for
	// longer than the lease duration it declared: it renews by rewriting
	// its record, so it is probably dead, and its shards do not run (it
	// stops them before its lease can be broken). The library still counts
	// it until its lease is broken, as the survivors do once they have seen
	// it stand that long.
	Silent bool `json:"silent"`
	// LastModified is its blob's last write, by the server's clock;
	// SilentSeconds how long before ServerDate (or Listed) that was.
	LastModified  *time.Time `json:"lastModified,omitempty"`
	SilentSeconds float64    `json:"silentSeconds,omitempty"`
	Since         *time.Time `json:"since,omitempty"` // when it started, by its clock
	// HeldByRecord is how many shards it held at its last write, by its
	// own count; HeldByListing how many shard blobs the listing shows it
	// holding. They differ for a moment while it claims or hands over.
	HeldByRecord  int `json:"heldByRecord"`
	HeldByListing int `json:"heldByListing"`
	// HeldByList is how many shards its held list (<prefix>/held/<ID>)
	// names, by the count in the list's metadata: those the survivors take
	// from the list if it dies. null unless List is "ok".
	HeldByList *int `json:"heldByList"`
	// List is "ok"; "none": it has no held list (it holds no shard, has
	// not written its list yet, or has ended); "malformed": the list's
	// role or count does not read, and the library refuses it; "unread":
	// reading it failed. leaderctl status on the list reads its lines.
	List     string  `json:"list"`
	ShardSet string  `json:"shardSet"` // its set's digest, "" if its record does not say
	SetSize  int     `json:"setSize"`  // its set's size, 0 if its record does not say
	Declared float64 `json:"declaredSeconds,omitempty"`
}

// setReport is a group: the live sessions whose records carry the same set
// digest share that set's shards. More than one during a rollout that
// changes the set.
type setReport struct {
	ShardSet string   `json:"shardSet"`
	SetSize  int      `json:"setSize"`
	Sessions []string `json:"sessions"` // live, sorted
	// Held is how many shard blobs its sessions hold: SetSize once every
	// shard of the set runs.
	Held   int          `json:"held"`
	Spread spreadReport `json:"spread"`
}

// spreadReport is how many shards the live sessions hold, by the listing:
// the library keeps them within one of each other within a set.
type spreadReport struct {
	Min       int  `json:"min"`
	Max       int  `json:"max"`
	WithinOne bool `json:"withinOne"`
}

// unownedReport counts the shard blobs no live session holds.
type unownedReport struct {
	Count        int      `json:"count"`
	Free         int      `json:"free"`
	DeadHolder   int      `json:"deadHolder"`
	SilentHolder int      `json:"silentHolder"`
	Names        []string `json:"names"` // all of them, sorted
}

type shardReport struct {
	Name  string `json:"name"`
	State string `json:"state"` // owned, free, deadHolder or silentHolder
	// Session is the session its record names: its holder, or its last.
	Session  string `json:"session,omitempty"`
	Identity string `json:"identity,omitempty"` // of its last term's holder
	Term     int64  `json:"term"`               // its last term; 0 if none recorded
	// Since is when its last term began, by its holder's clock.
	Since *time.Time `json:"since,omitempty"`
}

// newShardsReport is the report of a listing that ended at now, by our
// clock; serverNow is the server's when it listed the sessions, zero if its
// answer did not say.
func newShardsReport(container, prefix string, info leaderelection.ShardsInfo, now, serverNow time.Time) shardsReport {
	r := shardsReport{
		Container: container, Prefix: prefix, Listed: now.UTC().Truncate(time.Millisecond),
		Sessions: []sessionReport{}, Sets: []setReport{}, Shards: []shardReport{},
		Unowned: unownedReport{Names: []string{}}, ShardBlobs: len(info.Shards),
	}
	// A session's silence is how long before the listing its blob was last
	// written. Last-Modified is the server's clock, and ours may be off from
	// it by any amount: judge it against the server's own Date. Without one,
	// our clock's skew goes into the silence, and a session may be called
	// silent (or live) by as much as the clocks disagree.
	ref := now
	if !serverNow.IsZero() {
		ref = serverNow
		d := serverNow.UTC()
		r.ServerDate = &d
	}
	for _, se := range info.Sessions {
		sr := sessionReport{
			ID: se.ID, Identity: se.Identity, Live: se.Live, HeldByRecord: se.Owned,
			ShardSet: se.ShardSet, SetSize: se.SetSize, Declared: se.DeclaredDuration.Seconds(),
		}
		if !se.Since.IsZero() {
			since := se.Since.UTC()
			sr.Since = &since
		}
		if !se.LastModified.IsZero() {
			lm := se.LastModified.UTC()
			sr.LastModified = &lm
			// A session renews by rewriting its record well within the
			// duration it declared; not written for longer, it has stopped
			// its shards. The library's Live counts it until its lease is
			// broken, which is its rule for claims: shown as live, it
			// would say that shards run that do not.
			if silent := ref.Sub(se.LastModified); se.Live && se.DeclaredDuration > 0 && silent > se.DeclaredDuration {
				sr.Live, sr.Silent, sr.SilentSeconds = false, true, silent.Round(time.Second).Seconds()
			}
		}
		switch {
		case sr.Live:
			r.LiveSessions++
		case sr.Silent:
			r.SilentSessions++
		default:
			r.DeadSessions++
		}
		r.Sessions = append(r.Sessions, sr)
	}
	byID := make(map[string]*sessionReport, len(r.Sessions))
	for i := range r.Sessions {
		byID[r.Sessions[i].ID] = &r.Sessions[i]
	}
	for _, sh := range info.Shards {
		out := shardReport{Name: sh.Name, Session: sh.Session, Identity: sh.Term.Identity, Term: sh.Term.Number}
		if !sh.Term.Since.IsZero() {
			since := sh.Term.Since.UTC()
			out.Since = &since
		}
		holder := byID[sh.Session]
		switch {
		case !sh.Held:
			out.State = shardFree
			r.Unowned.Free++
		case sh.Session != "" && holder != nil && holder.Live:
			out.State = shardOwned
		case sh.Session != "" && holder != nil && holder.Silent:
			out.State = shardSilentHolder
			r.Unowned.SilentHolder++
		default:
			out.State = shardDeadHolder
			r.Unowned.DeadHolder++
		}
		if sh.Held && holder != nil {
			holder.HeldByListing++
		}
		if out.State != shardOwned {
			r.Unowned.Names = append(r.Unowned.Names, sh.Name)
		}
		r.Shards = append(r.Shards, out)
	}
	r.Unowned.Count = len(r.Unowned.Names)

	// Sets and spreads, among the live sessions, in ID order.
	sets := map[string]*setReport{}
	var live []int
	for _, se := range r.Sessions {
		if !se.Live {
			continue
		}
		live = append(live, se.HeldByListing)
		// A record with no digest (an older version) is a group of its own.
		key := se.ShardSet
		if key == "" {
			key = "\x00" + se.ID
		}
		g := sets[key]
		if g == nil {
			g = &setReport{ShardSet: se.ShardSet, SetSize: se.SetSize}
			sets[key] = g
		}
		g.Sessions = append(g.Sessions, se.ID)
		g.Held += se.HeldByListing
	}
	for _, g := range sets {
		var held []int
		for _, id := range g.Sessions {
			held = append(held, byID[id].HeldByListing)
		}
		g.Spread = spreadOf(held)
		r.Sets = append(r.Sets, *g)
	}
	slices.SortFunc(r.Sets, func(a, b setReport) int {
		return cmp.Or(cmp.Compare(a.ShardSet, b.ShardSet), cmp.Compare(a.Sessions[0], b.Sessions[0]))
	})
	if len(live) > 0 {
		sp := spreadOf(live)
		r.Spread = &sp
	}
	return r
}

func spreadOf(held []int) spreadReport {
	s := spreadReport{Min: held[0], Max: held[0]}
	for _, h := range held[1:] {
		s.Min, s.Max = min(s.Min, h), max(s.Max, h)
	}
	s.WithinOne = s.Max-s.Min <= 1
	return s
}

// printShards writes a report for a person: the sessions, then whether the
// shards are spread and all held, then (with each) every shard.
func printShards(w io.Writer, r shardsReport, each bool) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	line("prefix", "%s/%s, listed %s", r.Container, r.Prefix, r.Listed.Format(time.RFC3339))
	silent := ""
	if r.SilentSessions > 0 {
		silent = fmt.Sprintf(", %d silent (probably dead: see below)", r.SilentSessions)
	}
	line("sessions", "%d live, %d dead%s", r.LiveSessions, r.DeadSessions, silent)
	if len(r.Sessions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tIDENTITY\tSTATE\tSINCE\tHELD\tRECORD\tLIST\tSET")
		for _, se := range r.Sessions {
			state, since, set := "dead", "-", "-"
			switch {
			case se.Live:
				state = "live"
			case se.Silent:
				state = "silent"
			}
			if se.Since != nil {
				since = fmt.Sprintf("%s (%s)", se.Since.Format(time.RFC3339), ago(*se.Since, r.Listed))
			}
			if se.ShardSet != "" {
				set = fmt.Sprintf("%s/%d", se.ShardSet, se.SetSize)
			}
			identity := se.Identity
			if identity == "" {
				identity = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", se.ID, identity, state, since, se.HeldByListing, se.HeldByRecord, listText(se), set)
		}
		tw.Flush()
	}
	for _, se := range r.Sessions {
		if se.Silent {
			line("silent", "%s", silentText(se, r.ServerDate != nil))
		}
	}
	switch len(r.Sets) {
	case 0:
	case 1:
		g := r.Sets[0]
		line("set", "%s: %s", setName(g), setHeld(g))
	default:
		line("sets", "%d: the live sessions run different sets (a rollout that changes them?); each set's shards are shared among its own sessions", len(r.Sets))
		for _, g := range r.Sets {
			fmt.Fprintf(w, "  %s: %s, %s\n", setName(g), setHeld(g), spreadText(g.Spread, moving))
		}
	}
	if r.Spread == nil {
		line("spread", "no live session")
	} else {
		why := moving
		if len(r.Sets) > 1 {
			why = "across sets, which the library does not balance: see each set above"
		}
		line("spread", "%s", spreadText(*r.Spread, why))
	}
	u := r.Unowned
	switch {
	case len(r.Sessions) == 0 && r.ShardBlobs == 0:
		// The container exists (shards says so if it does not), but no
		// ShardOwner has ever run under this prefix: most likely a
		// mistyped name, not an idle fleet.
		line("unowned", "none: nothing under this prefix: check -container and -prefix")
	case u.Count == 0:
		line("unowned", "none: a live session holds every shard blob")
	default:
		names := u.Names[:min(len(u.Names), unownedShown)]
		more := ""
		if n := len(u.Names) - len(names); n > 0 {
			more = fmt.Sprintf(" and %d more (-shards or -json lists them all)", n)
		}
		silent := ""
		if u.SilentHolder > 0 {
			silent = fmt.Sprintf(", %d held by a silent session", u.SilentHolder)
		}
		line("unowned", "%d shard blobs no live session holds (%d free, %d held by a dead session%s): %s%s",
			u.Count, u.Free, u.DeadHolder, silent, strings.Join(names, ", "), more)
	}
	if !each {
		line("shards", "%d blobs (-shards lists each with its owner and term)", r.ShardBlobs)
		return
	}
	line("shards", "%d blobs", r.ShardBlobs)
	if len(r.Shards) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SHARD\tSTATE\tSESSION\tIDENTITY\tTERM")
	for _, sh := range r.Shards {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\n", sh.Name, sh.State, orDash(sh.Session), orDash(sh.Identity), sh.Term)
	}
	tw.Flush()
}

// silentText says how long a silent session has not written its blob, and
// what that means. byServer: the silence was judged by the server's clock.
func silentText(se sessionReport, byServer bool) string {
	clock := "by the server's clock"
	if !byServer {
		clock = "by our clock against the server's, which may disagree"
	}
	identity := ""
	if se.Identity != "" {
		identity = " (" + se.Identity + ")"
	}
	// It stops its shards before its lease can be broken, which is the
	// declared duration after its last write: none of them runs now.
	held := "it holds no shard"
	if se.HeldByListing > 0 {
		held = fmt.Sprintf("the shards it holds (%d) do not run until a live session of its set breaks its lease and takes them", se.HeldByListing)
	}
	return fmt.Sprintf("%s%s silent for %v (longer than its declared %v, %s): probably dead; %s",
		se.ID, identity, time.Duration(se.SilentSeconds)*time.Second, time.Duration(se.Declared*float64(time.Second)), clock, held)
}

// listText is a session's LIST column: the count its held list gives,
// "-" if it has none, "bad" if the list's role or count does not read, "?"
// if it was not read.
func listText(se sessionReport) string {
	switch se.List {
	case listOK:
		return strconv.Itoa(*se.HeldByList)
	case listNone:
		return "-"
	case listMalformed:
		return "bad"
	}
	return "?"
}

func setName(g setReport) string {
	if g.ShardSet == "" {
		return "no set recorded (" + g.Sessions[0] + ", an older version)"
	}
	return fmt.Sprintf("%s (%d shards)", g.ShardSet, g.SetSize)
}

// setHeld says whether every shard of a set runs: its live sessions hold
// as many shards as it has.
func setHeld(g setReport) string {
	s := fmt.Sprintf("live sessions: %d, holding %d", len(g.Sessions), g.Held)
	switch {
	case g.ShardSet == "":
	case g.Held >= g.SetSize:
		s += fmt.Sprintf(" of its %d: every shard of the set runs", g.SetSize)
	default:
		s += fmt.Sprintf(" of its %d: %d not held by them (free, not created yet, or held by a dead, a silent or another set's session)", g.SetSize, g.SetSize-g.Held)
	}
	return s
}

// moving is why a set's spread is not within one: for a moment, while
// shards move.
const moving = "a session is claiming or handing over"

// spreadText says whether a spread is within one, and if not, why.
func spreadText(s spreadReport, why string) string {
	t := fmt.Sprintf("%d to %d shards per live session", s.Min, s.Max)
	if s.WithinOne {
		return t + ": within one"
	}
	return t + ": not within one (" + why + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// States of a session's held list in a shards report.
const (
	listOK        = "ok"
	listNone      = "none"
	listMalformed = "malformed"
	listUnread    = "unread"
)

// listCount is what the metadata of a session's held list says.
type listCount struct {
	state string // listOK, listNone, listMalformed or listUnread
	count int    // if listOK
}

// listReader reads the count in each session's held list: one request a
// session (its properties: the count is in its metadata; its lines only
// status reads), listsAtOnce at a time, never a listing of the shards.
type listReader struct {
	l      *session
	prefix string
	s      leaderelection.BlobSettings // for the lists' managers
}

// listsAtOnce is how many held lists shards reads at once.
const listsAtOnce = 8

func newListReader(l *session, s leaderelection.BlobSettings) *listReader {
	ls := l.settingsFor("")
	if ls.ServiceURL != "" && ls.Credential == nil {
		// One credential for every list, rather than one each, each of
		// which would get a token of its own (the Azure CLI's takes
		// seconds). If it cannot be built, each manager builds its own.
		if cred, err := azidentity.NewDefaultAzureCredential(nil); err == nil {
			ls.Credential = cred
		}
	}
	return &listReader{l: l, prefix: s.Blob, s: ls}
}

// read reads the held lists of sessions, within -timeout in all: a list
// that could not be read is listUnread, and the report goes on.
func (lr *listReader) read(ctx context.Context, sessions []leaderelection.SessionInfo) map[string]listCount {
	ctx, cancel := context.WithTimeout(ctx, lr.l.timeout)
	defer cancel()
	out := make(map[string]listCount, len(sessions))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, listsAtOnce)
	for _, se := range sessions {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			lc := lr.readOne(ctx, se.ID)
			mu.Lock()
			out[se.ID] = lc
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (lr *listReader) readOne(ctx context.Context, id string) listCount {
	peek := &blobPeek{}
	s := lr.s
	s.Blob, s.ClientOptions = wire.HeldBlob(lr.prefix+"/", id), peek.options()
	m, err := leaderelection.NewBlobLeaseManager(s, leaderelection.WithLogger(nil))
	if err != nil {
		return listCount{state: listUnread}
	}
	defer m.CloseIdleConnections()
	info, err := m.Inspect(ctx)
	switch {
	case err != nil:
		return listCount{state: listUnread}
	case !info.Exists:
		return listCount{state: listNone}
	}
	return heldCount(info.Role, peek.seen())
}

// heldCount is what a held list's metadata says, by the library's rules:
// its role held, its count a number as strconv.Itoa writes it.
func heldCount(role leaderelection.BlobRole, p peeked) listCount {
	v, ok := p.meta(wire.MetaHeld)
	n, err := strconv.Atoi(v)
	if role != leaderelection.RoleHeld || !ok || err != nil || n < 0 || strconv.Itoa(n) != v {
		return listCount{state: listMalformed}
	}
	return listCount{state: listOK, count: n}
}

// addLists adds the count in each session's held list.
func (r *shardsReport) addLists(counts map[string]listCount) {
	for i := range r.Sessions {
		se := &r.Sessions[i]
		lc, ok := counts[se.ID]
		if !ok {
			continue
		}
		se.List = lc.state
		if lc.state == listOK {
			n := lc.count
			se.HeldByList = &n
		}
	}
}
