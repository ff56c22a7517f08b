/* Logging through NCCL's logger (or stderr before init / without NCCL). */
#ifndef LG_LOG_H
#define LG_LOG_H

#include "nccl_net_abi.h"

/* Sets the logger (NULL keeps the current one). */
void lg_log_set(ncclDebugLogger_t logger);
void lg_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define LG_WARN(...) lg_log(NCCL_LOG_WARN, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define LG_INFO(flags, ...) lg_log(NCCL_LOG_INFO, (flags), __FILE__, __LINE__, __VA_ARGS__)
#define LG_TRACE(...) lg_log(NCCL_LOG_TRACE, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)

#endif
