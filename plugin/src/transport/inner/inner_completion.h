/* Wrap mode's completion model (docs/wrap-mode.md, "Completion"): whether the inner plugin's
 * send completion means the data is placed in the receiver's buffer, so that it can complete
 * NCCL's send without linkguard's acknowledgement. The ncclNet API has no property that says
 * so: LINKGUARD_INNER_PLACED does, and at "auto" (the default) a table of the plugins known
 * by the name they report, with acknowledged completion for every other one. */
#ifndef LG_INNER_COMPLETION_H
#define LG_INNER_COMPLETION_H

/* Pure: 1 placed, 0 acknowledged, for the setting `setting` ("auto" or a boolean word) and
 * the inner table's `name` and ABI `version`; *why says which (a table row, the setting).
 * -1 if `setting` is neither (the caller WARNs and decides as "auto" would). */
int lg_inner_completion_placed(const char *setting, const char *name, int version,
                               const char **why);

#endif
