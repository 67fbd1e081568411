// Package localfs tells whether a file lives on a file system of this
// machine. Code mapped from a file (a compile cache's entry) must be: on a
// network file system a page the kernel dropped is read again from a file
// another host may have removed meanwhile, and the read faults the process.
package localfs
