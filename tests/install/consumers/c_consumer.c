/* A C program built against the installed package with pkg-config only:
 * loads the installed cpu plugin through sigma.h and asks it for its
 * devices. Prints "c consumer: N device(s)". */
#include <sigma/sigma.h>

#include <stdio.h>

int main(void) {
  sigma_plugin_t* plugin = NULL;
  if (sigma_plugin_load("cpu", "", &plugin) != SIGMA_OK) {
    fprintf(stderr, "c consumer: %s\n", sigma_last_error());
    return 1;
  }
  const hal_api_t* api = sigma_plugin_api(plugin);
  uint32_t n = 0;
  if (api->device->get_count(&n) != HAL_OK || n == 0) {
    fprintf(stderr, "c consumer: the cpu plugin reports no device\n");
    sigma_plugin_unload(plugin);
    return 1;
  }
  printf("c consumer: libsigma %s, %u device(s)\n", sigma_version(), n);
  sigma_plugin_unload(plugin);
  return 0;
}
