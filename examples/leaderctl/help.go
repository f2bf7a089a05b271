package main

// connectionHelp describes the flags status, break and repair take.
const connectionHelp = accountHelp + `
Lease, both required: there are no defaults, so that break never acts on a
lease you did not name:
  -container NAME       container of the lease blob (env LEASE_CONTAINER)
  -blob NAME            the lease blob (env LEASE_BLOB)

  -timeout D            give up after D (default 10s)
`

// accountHelp describes the flags that choose the storage account, which
// every command takes.
const accountHelp = `Storage account, exactly one of (a flag overrides the environment):
  -connection-string S  storage connection string
                        (env AZURE_STORAGE_CONNECTION_STRING)
  -account-url URL      blob service URL, e.g. https://myaccount.blob.core.windows.net/,
                        signed in with DefaultAzureCredential: environment, workload or
                        managed identity, Azure CLI... (env AZURE_STORAGE_ACCOUNT_URL)
  -sas-url URL          the account's or the container's URL with a SAS token
                        (env AZURE_STORAGE_SAS_URL)
`

const mainHelp = `leaderctl shows, breaks and repairs the lease of a leaderelection group,
and shows a ShardOwner's sessions and shards.

Usage:
  leaderctl status [flags]   who leads, since when, the lease's state and the blob's role
  leaderctl break [flags]    make the leader stop, so that another instance can lead
  leaderctl repair [flags]   rewrite a record that does not read, on a blob nobody holds
  leaderctl shards [flags]   a ShardOwner's sessions, who holds each shard, the spread,
                             the shards no live session holds (-prefix instead of -blob)
  leaderctl quorum [flags]   a mutex over 3 or 5 accounts (NewQuorumMutex): each account's
                             lease, who leads, which accounts it holds (an account flag each)
  leaderctl help [command]

` + connectionHelp + `
Exit status: 0 done, 1 a storage request failed, status or shards found
  that the container does not exist, or quorum could not tell who leads
  (fewer than a majority of the accounts answered), 2 usage error (nothing sent),
3 break found the holder of an ETag lease alive, and did not break it,
4 break was pointed at a ShardOwner's session or shard, which it never breaks,
  or at its held list or handoff note, which are no leases,
5 repair wrote nothing: the lease is held, -term would lower the term, or the
  blob is a held list or a handoff note.
`

const statusHelp = `Usage: leaderctl status [flags]

Shows who leads (the identity and term the leader recorded in the blob), since
when (UTC, and how long ago), and the lease's state, status and duration. When
nobody holds the lease it says "no leader" and shows the last leader, if any.
For a held lease it shows its kind and the lease duration the leader declared;
for an ETag lease (a LeaseDuration outside 15s-60s), also the blob's ETag, how
long it has stood unchanged as seen from here, and when it was last written:
every renewal changes it, and followers break the lease once it has stood for
the declared duration. Reading needs no lease and disturbs nobody.

It shows the blob's role: a mutex's lease, or a ShardOwner's session
(<prefix>/sessions/<ID>) or shard (<prefix>/shards/<name>), whose leases
follow the ShardOwner's rules and are never broken by hand. For a shard it
lists the ShardOwner's blobs to show the session that holds it, and whether
that session is live. A record that does not read (a term number that is not
one, or is the largest; a declared lease duration no setting declares) is
shown with its key, its value, what is wrong, and the repair to run: no term
follows such a record until it is repaired. If storage answers that the
container does not exist, status says so and exits with 1.

A ShardOwner also writes two kinds of blob that are no leases, only hints,
which status reads and explains (one request for the blob, one for its body,
one for each session it names):
  held list     <prefix>/held/<session>: the shards the session holds, one
                line each, "name term gen ETag" (gen: the session's term its
                claim derived the shard's lease ID from; 0: the shard was
                handed to it), and their count in its metadata (leaderheld).
                If the session dies, the survivors take its shards from it,
                each only if the shard's lease and record are still as the
                line says. A session a few shards short reads the others'
                lists too, then each shard none names, to find the free
                ones without a listing. status shows whose list it is and
                whether that session is live, the count and how many lines
                read, and the first 20 shards. A list that does not read whole (a line
                that does not, a count that disagrees, a role that is not
                held) is shown as malformed, with each problem: the library
                refuses it whole, and the survivors list every shard instead
  handoff note  <prefix>/handoff/<receiver>/<giver>-0: the shards one session
                handed to another, "name term ETag" each, in its metadata
                (leaderhandoff). status shows the giver and the receiver,
                whether each is live, the shards, and the entries that do
                not read, which the receiver skips
A blob that says no role, but whose name is a held list's or a note's, is
shown as one. break refuses both, and repair.

  -watch D              read the lease every 500ms for D, to see whether the
                        ETag changes (the holder renews) or stands (default 0:
                        one read, and the ETag is first seen now)
  -json                 print one JSON object instead:
                        {"container", "blob", "exists", "held", "state", "status",
                         "duration", "kind", "declaredSeconds", "etag",
                         "etagStoodSeconds", "etagChanges", "watchedSeconds",
                         "lastModified", "leader": null or {"identity", "term",
                         "since", "ageSeconds"}, "lastLeader": the same, when
                         nobody leads, "role": "mutex", "session", "shard",
                         "held", "handoff" or "" (none recorded), "shardOwner":
                         for a session, a shard, a held list or a note,
                         {"prefix", "shard", "session", "sessionLive",
                         "sessionIdentity", "listError", "sessionError"},
                         "recordError": when the record does not read, {"key",
                         "value", "rule", "repair"}, "heldList": for a held
                         list, {"leaderheld": as stored, or null, "lines",
                         "parsed", "shards": [{"name", "term", "gen",
                         "etag"}], "malformed", "problems", "bytes",
                         "readError"}, "handoff": for a note, {"from", "to":
                         {"id", "live", "exists", "identity", "error"},
                         "part", "shards": [{"name", "term", "etag"}],
                         "skipped"}}. "kind" is the lease's by its duration; a
                         session's or a shard's follows its role's rules

` + connectionHelp

const breakHelp = `Usage: leaderctl break [flags]

Breaks the lease: the leader's next renewal fails, its leader func is
cancelled, and once the break period has passed any instance can take the
lease. It shows who held the lease before breaking it. The deposed leader
lets the free lease pass once, so a waiting instance takes over; alone, it
leads again. A lease nobody holds is left alone.

An ETag lease (a LeaseDuration outside 15s-60s) may outlast any break period,
so break follows the followers' rule for it: it waits until the blob's ETag
has stood unchanged, as seen from here, for the lease duration the leader
declared, then breaks the lease on condition that the ETag is unchanged. It
waits that long and -timeout more. If the ETag changes, the leader is alive
and renewing: break exits with status 3 without breaking anything.

With -force, or on a native lease, the break is conditional on the blob
being as break last read it. When it changed meanwhile (an ETag leader
renewed), break reads it again and breaks again while the same recorded
term holds it; if the lease ended or passed to another term meanwhile,
break exits with status 3 without breaking anything. The holder it shows
is the one it read a moment before that.

It never breaks a ShardOwner's session or shard (a blob whose role, in its
record, says so), -force or not: it says why and exits with status 4; nor
its held list or handoff note, which are no leases, only hints. A
shard's lease is infinite and never renewed (its ETag stands still while its
func runs), so the silence rule does not apply to it; it passes to another
instance only when its session ends: stop or restart the instance that holds
it, and a dead session's shards are taken by the survivors within the
session's lease duration. The surviving instances break a silent session's
lease themselves. A blob whose record says no role is broken as a mutex's.

  -period D             for a native lease, the break period, whole seconds
                        from 0s to 60s. Default: the safe break period, the
                        LeaseDuration the holder declared in its record (60s
                        if it declared none). A connected
                        leader stops at its next renewal whatever the
                        period; one cut off from
                        storage never learns of the break and acts until its
                        own safety deadline, which a break this long never
                        precedes. Give a shorter one only if the holder is
                        known to be dead: otherwise another instance may lead
                        while the old leader still acts.
  -force                for an ETag lease, break it at once instead of waiting
                        for its ETag to stand. A connected leader stops at its
                        next renewal (within its RenewInterval), and another
                        instance may lead meanwhile; one cut off from storage
                        acts until its own deadline, up to its lease duration
                        after its last renewal. Only for a holder known to be
                        dead, or a live one that must stop now.
  -lease-duration D     the holders' BlobSettings.LeaseDuration, if it is not
                        the library's default 15s: how long an ETag lease
                        whose record declares no duration must stand

` + connectionHelp

const repairHelp = `Usage: leaderctl repair -term N [flags]

Rewrites the record of a blob nobody holds a lease on, when it does not read
(leaderctl status shows what is wrong): it writes a clean record of an ended
term numbered N, keeping the blob's role (a mutex's, a ShardOwner's session's
or shard's; a mutex's if it says none), so that the next holder's term is
N+1. A fleet that stopped on the record carries on by itself. It prints what
it wrote. Two requests; the write is conditional on the blob being unchanged
since it was read.

It writes nothing, and exits with status 5, while the lease is held (the
holder's record is its own: wait until it is free), when the blob does not
exist, when it is a ShardOwner's held list or handoff note (no lease: its
metadata is what it says), and when N is lower than the term that reads on
the blob, unless -allow-lower is given.

  -term N               the number of the last term, 0 or more: the next
                        holder's is N+1. Required. Choose it at least as high
                        as any term the fleet, or a system downstream that
                        fences on it, has seen: an instance that saw a higher
                        one continues above it, but one that never saw the
                        blob trusts N.
  -allow-lower          write N even if it is lower than the term on the
                        blob. A system downstream that fences on the term
                        refuses the next leader until its term passes the
                        highest it saw. The largest term number is repaired
                        only this way.

` + connectionHelp

const shardsHelp = `Usage: leaderctl shards -container NAME -prefix P [flags]

Shows the ShardOwner whose prefix (its BlobSettings.Blob) is P, as one
listing of <P>/sessions/ and <P>/shards/ sees it: it reads, and holds,
breaks or changes nothing. Two or more requests (the sessions, then the
shards 1,000 a page), and one for each session's held list, not one
snapshot: a session that started after the sessions were listed shows as
dead until the next listing. If storage answers that the container does not
exist, shards says so and exits with 1; a prefix with nothing under it is
named as such.

  sessions  each session's ID, the identity of the instance that runs it,
            live, silent or dead (live: its lease is held and it has written
            its record within the lease duration it declared; silent: its
            lease is held, but its blob has not been written for longer
            than that, judged by the server's clock (its answer's Date; by
            ours if it gives none): probably dead, and its shards do not
            run, though the library counts it until a survivor breaks its
            lease), since when (by its clock), HELD: the shard blobs the
            listing shows it holding, RECORD: how many it held at its last
            write by its own count, LIST: how many its held list
            (<P>/held/<ID>) names by the count in its metadata, the shards
            the survivors take from it if it dies ("-": it has none, "bad":
            its role or count does not read, and the library refuses it,
            "?": the read failed; leaderctl status on the list reads its
            lines), and SET: its set of shards' digest/size
  set       the live sessions whose records carry the same set digest share
            that set's shards; more than one set during a rollout that
            changes it. Every shard of a set runs once its sessions hold as
            many as it has
  spread    the fewest and the most shards a live session holds: the library
            keeps them within one of each other, within a set
  unowned   the shard blobs no live session holds: free (a shard removed
            from every set stays so), held by a dead session, which the
            survivors take within the session's lease duration, or held by
            a silent one, which they take once they have broken its lease;
            the first 20 named

A session's or a shard's lease is never broken by hand (leaderctl break
refuses it): to move shards, stop or restart the instance that runs them.

  -prefix P             the ShardOwner's prefix, required (env LEASE_PREFIX)
  -container NAME       its container, required (env LEASE_CONTAINER)
  -shards               also list every shard blob: its state (owned, free,
                        deadHolder, silentHolder), the session its record
                        names, the identity and the term of its last holder
  -json                 print one JSON object instead (with -watch, one per
                        listing, each on one line):
                        {"container", "prefix", "listed", "serverDate",
                         "liveSessions", "silentSessions", "deadSessions",
                         "sessions": [{"id", "identity", "live", "silent",
                         "lastModified", "silentSeconds", "since",
                         "heldByRecord", "heldByListing",
                         "heldByList": null unless "list" is "ok", "list":
                         "ok", "none", "malformed" or "unread", "shardSet",
                         "setSize", "declaredSeconds"}],
                         "sets": [{"shardSet", "setSize", "sessions", "held",
                         "spread"}], "spread": null with no live session, or
                         {"min", "max", "withinOne"}, "shardBlobs",
                         "unowned": {"count", "free", "deadHolder",
                         "silentHolder", "names"},
                         "shards": [{"name", "state", "session", "identity",
                         "term", "since"}]}. Times are UTC; "since" is by the
                         session's or the shard holder's clock. Fields may
                         be added, never renamed
  -watch                list again every -interval until interrupted; a
                        listing that fails is reported and the watch goes on
  -interval D           how often -watch lists (default 5s)
  -timeout D            give up on a listing after D (default 10s)

` + accountHelp

const quorumHelp = `Usage: leaderctl quorum -connection-string S|-account-url URL|-sas-url URL
         (once per account, 3 or 5 of them) -container NAME -blob NAME [flags]

Shows a mutex that leads over a majority of 3 or 5 storage accounts
(leaderelection.NewQuorumMutex): it reads each account's lease at once (one
request each, each bounded by -timeout), and holds, breaks or changes nothing.

First who leads: the term held, and recorded, on a majority of the accounts
(terms never repeat: the accounts that show one term held are its leader's),
since when, and which accounts it holds. "degraded" when it holds fewer than
all of them as read from here (an account that did not answer counts as not
held): it leads on, and stops if it loses the majority; each account it does
not hold is named with why (unreachable, free, held by another, its
container missing). "no leader" when no term is held on a majority (nobody
contends, or a contender holds a minority, or has not recorded its term yet),
with the highest term recorded. "unknown: no majority reachable" when fewer
than a majority answered, and "unknown" when those that did not answer could
still make a majority for a term: both exit with 1.

Then one line per account, in the order given (its index is the mutex's, as
in its logs, Degraded() and its metrics' leaderelection.account): the
account's endpoint (scheme, host and path: never a key or a SAS token), the
blob, the holder's identity and term ("-" and the last term, ended, when
nobody holds it), and the lease's state, status and duration, or the error
if the account did not answer. If every account that answered says its
container does not exist, quorum says so and exits with 1.

Storage accounts, 3 or 5, in the order the mutex was given them; each flag
given once per account, the kinds mixed as the accounts need (the
environment's storage account is not read):
  -connection-string S  an account's connection string
  -account-url URL      an account's blob service URL, signed in with
                        DefaultAzureCredential
  -sas-url URL          an account's or a container's URL with a SAS token
Lease, both required:
  -container NAME       the container, once for every account, or once per
                        account in their order (env LEASE_CONTAINER: every
                        account's)
  -blob NAME            the lease blob, likewise (env LEASE_BLOB)

  -timeout D            give up on an account after D (default 10s); the
                        accounts are read at once
  -json                 print one JSON object instead:
                        {"majority", "answered", "decided": false when who
                         leads is unknown, "leader": null or {"identity",
                         "term", "since", "ageSeconds"}, "holds": the
                         accounts the leader holds, "degraded", "lastLeader":
                         when nobody leads, "accounts": [{"index", "endpoint",
                         "container", "blob", "answered", "error", "exists",
                         "containerMissing", "held", "state", "status",
                         "duration", "identity", "term", "termPending",
                         "leaderHolds"}]}
`
