/**
 * nbtune's JupyterLab plugin: a left-sidebar experiment list (the stores and
 * running kernels the server knows) and a status-bar summary, both fed by the
 * nbtune server extension (GET /nbtune/api/experiments); and a plugin that
 * renders again widget outputs the widget manager gave up on too early
 * (widgetrecovery.ts).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';

import { nbtuneIcon } from './icon';
import { ExperimentsModel } from './model';
import { ExperimentPanel } from './panel';
import { ExperimentsPanel } from './sidebar';
import { StatusItem } from './statusbar';
import { widgetRecoveryPlugin } from './widgetrecovery';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'nbtune:plugin',
  description: 'Lists nbtune experiments in the left sidebar and sums running trials in the status bar.',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    const model = new ExperimentsModel();
    const open = (name: string, source: string | null = null, label = ''): void => {
      // one panel per experiment and source: a second click brings the open one forward
      for (const w of app.shell.widgets('main')) {
        if (w instanceof ExperimentPanel && w.name === name && w.source === source) {
          app.shell.activateById(w.id);
          return;
        }
      }
      const view = new ExperimentPanel(name, source, label, model);
      app.shell.add(view, 'main');
      app.shell.activateById(view.id);
    };
    const panel = new ExperimentsPanel(model, open);
    panel.title.icon = nbtuneIcon;
    app.shell.add(panel, 'left', { rank: 600 });

    if (statusBar) {
      statusBar.registerStatusItem('nbtune:status', {
        item: new StatusItem(model, () => app.shell.activateById(panel.id)),
        align: 'left',
        rank: 100
      });
    }
    app.commands.addCommand('nbtune:open', {
      label: 'Open an nbtune experiment',
      execute: args => open(String(args.name), args.source ? String(args.source) : null)
    });
    app.commands.addCommand('nbtune:refresh', {
      label: 'Refresh nbtune experiments',
      execute: () => model.refresh()
    });
    model.start();
  }
};

export default [plugin, widgetRecoveryPlugin];
