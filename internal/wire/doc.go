// Package wire is the library's wire format: what its blobs say, to the
// other instances of a fleet, to other versions of the library, and to an
// operator's tools. It holds the metadata keys and roles, the record a
// holder writes under its lease (its term, its end, its declared lease
// duration, what a session or a shard adds), the names of a ShardOwner's
// blobs under its prefix, the lease IDs a session derives and another
// derives again, a session's list of the shards it holds, and the notes of
// the shards one session hands to another. Every instance must write and
// read them alike, across versions, so they live in one place, as pure
// functions of their inputs: nothing here takes a lease, reads a clock or
// calls storage.
//
// Every value read is data that another writer may have put there (an
// operator's tool, a script, a bug, another version): it is read, checked
// and reported, never trusted. A value of a record that does not read is a
// Problem naming the key, the value and the rule it breaks, and nothing is
// built on it: no term continues a term number that does not read
// (Record.TermBad), and a lease duration that does not read counts as the
// longest any setting can declare (MaxDeclarable), so that no follower
// breaks a lease sooner than its holder could have stopped. A held list that
// does not read whole is refused whole (ParseHeld); a note's entry that
// does not read is skipped (ParseNote). The library turns a Problem into
// its RecordError, which names the blob, and decides what to refuse.
package wire
