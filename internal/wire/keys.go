package wire

// Blob metadata keys the leader writes under its lease. Azure lower-cases
// nothing but the SDK may capitalise: they are read case-insensitively
// (Value).
const (
	MetaIdentity = "leaderidentity"
	MetaTerm     = "leaderterm"
	MetaSince    = "leadersince"
	MetaEnded    = "leaderended"    // set by the leader as it releases the lease
	MetaPriority = "leaderpriority" // the holder's priority (see the library's WithPriority)
	MetaNext     = "leadernext"     // an ended record: the identity the lease was handed to
)

// MetaLeaseDuration is the record's key for its writer's LeaseDuration:
// followers of an ETag lease time the holder's silence against it.
const MetaLeaseDuration = "leaderleaseduration"

// MetaRole is the record's key for its blob's role; MetaRecreated marks a
// blob created again, under a fleet that had recorded terms on it.
const (
	MetaRole      = "leaderkind"
	MetaRecreated = "leaderrecreated"
)

// The metadata keys only sessions and shards write (the rest is a term
// record).
const (
	MetaSession  = "leadersession"    // a shard's record: the session that holds it
	MetaOwned    = "leadershards"     // a session's record: how many shards it holds
	MetaSet      = "leadershardset"   // a session's record: its set of shards' digest (see balance.SetDigest)
	MetaSetCount = "leadershardcount" // a session's record: how many shards its set has
	MetaLeaving  = "leaderleaving"    // a session's record: it is handing its shards on, to end (see the library's leave)
	MetaHanding  = "leaderhanding"    // a session's record: how many shards it is handing over (asked to stop, not yet handed)
	MetaClaimGen = "leaderclaimgen"   // a shard's record: the term of the claiming session, from which its lease ID derives (ClaimLeaseID)
	MetaSeen     = "leaderseen"       // a session's record: the highest term its instance saw, or sent a record of, on any shard (see the library's shardfloors.go)
	MetaLongest  = "leaderlongest"    // a session's record: the longest lease duration its instance knows a session declared (see the library's mayRun); a mutex's blob created again: the longest its seeders knew a holder declared (SeedMetadata)
)

// MetaInstance is, on a blob beside a mutex's lease (CandidatesDir), the
// process that keeps it.
const MetaInstance = "leaderinstance"

// MetaHeld is a held list's entry count, as written (see ParseHeld).
const MetaHeld = "leaderheld"

// MetaNote is a handoff note's content, in its metadata, so that the
// receiver's listing of its notes reads them all at once (see NoteParts).
const MetaNote = "leaderhandoff"

// The roles a blob's record says it has (MetaRole): the values of the
// library's BlobRole, which is defined from these. A blob written by no one
// of ours, or by a version of the library before roles, has none ("").
const (
	RoleMutex     = "mutex"     // a mutex's (or a bare lease manager's) lease blob
	RoleSession   = "session"   // the blob of a ShardOwner's session
	RoleShard     = "shard"     // the blob of a ShardOwner's shard
	RoleHandoff   = "handoff"   // a note from one session to another, naming shards it handed to it
	RoleCandidate = "candidate" // a contender's blob beside a mutex's lease while it waits as a preferred candidate
	RoleHeld      = "held"      // the list of the shards one session holds, for the others to take them if it dies
)
